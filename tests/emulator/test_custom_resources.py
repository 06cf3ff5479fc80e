"""Custom resources: CRD serving, schema validation, defaulting, pruning, status subresource.

Real: HTTP, the official Python client (ApiextensionsV1Api, CustomObjectsApi).
Faked: nothing; CEL `x-kubernetes-validations` are not evaluated (documented divergence).
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

G, V, P = "example.com", "v1", "widgets"


def causes(exc: ApiException) -> list[tuple[str, str]]:
    body = json.loads(exc.body)
    return [(c["field"], c["reason"]) for c in body["details"]["causes"]]


def create_error(widgets, spec: dict) -> ApiException:
    with pytest.raises(ApiException) as err:
        widgets.widget("bad", spec)
    assert err.value.status == 422
    return err.value


def test_crd_is_established_and_discoverable(widgets):
    crd = widgets.ext.read_custom_resource_definition("widgets.example.com")
    assert {c.type: c.status for c in crd.status.conditions}["Established"] == "True"
    from kubernetes import client

    resources = client.CustomObjectsApi(widgets.emu.api_client()).get_api_resources(G, V)
    names = {r.name for r in resources.resources}
    assert {"widgets", "widgets/status"} <= names


def test_custom_resource_gets_metadata_and_generation(widgets):
    w = widgets.widget("w", {"size": 1})
    assert w["metadata"]["generation"] == 1 and w["metadata"]["uid"]


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        ({"size": "big"}, "spec.size", "FieldValueTypeInvalid"),
        ({}, "spec.size", "FieldValueRequired"),
        ({"size": 0}, "spec.size", "FieldValueInvalid"),
        ({"size": 11}, "spec.size", "FieldValueInvalid"),
        ({"size": 1, "color": "green"}, "spec.color", "FieldValueNotSupported"),
        ({"size": 1, "name": "a"}, "spec.name", "FieldValueInvalid"),
        ({"size": 1, "name": "abcdefghij"}, "spec.name", "FieldValueTooLong"),
        ({"size": 1, "name": "ab1"}, "spec.name", "FieldValueInvalid"),
        ({"size": 1, "tags": []}, "spec.tags", "FieldValueInvalid"),
        ({"size": 1, "tags": ["a", "b", "c", "d"]}, "spec.tags", "FieldValueTooMany"),
        ({"size": 1, "tags": [1]}, "spec.tags[0]", "FieldValueTypeInvalid"),
        ({"size": 1, "port": True}, "spec.port", "FieldValueTypeInvalid"),
        ({"size": 1, "params": {"a": 1}}, "spec.params.a", "FieldValueTypeInvalid"),
    ],
)
def test_schema_violations_are_invalid_with_field_causes(widgets, spec, field, reason):
    err = create_error(widgets, spec)
    assert (field, reason) in causes(err)


def test_invalid_message_matches_real_server_format(widgets):
    err = create_error(widgets, {"size": 11})
    body = json.loads(err.body)
    assert body["message"] == (
        'Widget.example.com "bad" is invalid: spec.size: Invalid value: 11: '
        "spec.size in body should be less than or equal to 10"
    )
    assert body["details"]["group"] == "example.com" and body["details"]["kind"] == "Widget"


def test_int_or_string_and_nullable_accept_their_values(widgets):
    w = widgets.widget("w", {"size": 1, "port": "http", "note": None})
    assert w["spec"]["port"] == "http" and w["spec"]["note"] is None
    assert widgets.widget("w2", {"size": 1, "port": 8080})["spec"]["port"] == 8080


def test_defaults_are_applied_recursively(widgets):
    w = widgets.widget("w", {"size": 1})
    assert w["spec"]["color"] == "red"
    assert w["spec"]["limits"] == {"cpu": "1"}


def test_null_on_non_nullable_field_is_dropped_then_defaulted(widgets):
    w = widgets.widget("w", {"size": 1, "color": None})
    assert w["spec"]["color"] == "red"


def test_unknown_fields_are_pruned_with_a_warning(widgets):
    w = widgets.widget(
        "w", {"size": 1, "junk": {"x": 1}, "free": {"kept": True}}, labels={"a": "b"}
    )
    assert "junk" not in w["spec"]
    assert w["spec"]["free"] == {"kept": True}
    assert w["metadata"]["labels"] == {"a": "b"}


def test_strict_field_validation_rejects_unknown_fields(widgets):
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, "junk": 1},
    }
    with pytest.raises(ApiException) as err:
        widgets.custom.create_namespaced_custom_object(
            G, V, widgets.ns, P, body, field_validation="Strict"
        )
    assert err.value.status == 400 and 'unknown field \\"spec.junk\\"' in err.value.body


def test_main_resource_write_ignores_status(widgets):
    widgets.widget("w", {"size": 1})
    out = widgets.custom.patch_namespaced_custom_object(
        G, V, widgets.ns, P, "w", {"status": {"phase": "Done"}}
    )
    assert "status" not in out


def test_status_write_changes_only_status(widgets):
    w = widgets.widget("w", {"size": 1})
    w["spec"]["size"] = 5
    w["status"] = {"phase": "Running", "bogus": 1}
    out = widgets.custom.replace_namespaced_custom_object_status(G, V, widgets.ns, P, "w", w)
    assert out["status"] == {"phase": "Running"}  # pruned
    assert out["spec"]["size"] == 1
    assert out["metadata"]["generation"] == 1


def test_generation_bumps_on_spec_change_only(widgets):
    widgets.widget("w", {"size": 1})
    labelled = widgets.custom.patch_namespaced_custom_object(
        G, V, widgets.ns, P, "w", {"metadata": {"labels": {"x": "y"}}}
    )
    assert labelled["metadata"]["generation"] == 1
    status = widgets.custom.patch_namespaced_custom_object_status(
        G, V, widgets.ns, P, "w", {"status": {"phase": "A"}}
    )
    assert status["metadata"]["generation"] == 1
    changed = widgets.custom.patch_namespaced_custom_object(
        G, V, widgets.ns, P, "w", {"spec": {"size": 2}}
    )
    assert changed["metadata"]["generation"] == 2


def test_status_subresource_validates_against_schema(widgets):
    widgets.widget("w", {"size": 1})
    with pytest.raises(ApiException) as err:
        widgets.custom.patch_namespaced_custom_object_status(
            G, V, widgets.ns, P, "w", {"status": {"observedGeneration": "x"}}
        )
    assert ("status.observedGeneration", "FieldValueTypeInvalid") in causes(err.value)


def test_deleting_crd_deletes_its_custom_resources(widgets):
    from e2e.fixtures import eventually

    widgets.widget("w", {"size": 1})
    widgets.ext.delete_custom_resource_definition("widgets.example.com")

    def crd_gone() -> bool:
        try:
            widgets.ext.read_custom_resource_definition("widgets.example.com")
        except ApiException as exc:
            return exc.status == 404
        return False

    assert eventually(crd_gone)
    with pytest.raises(ApiException) as err:
        widgets.custom.list_namespaced_custom_object(G, V, widgets.ns, P)
    assert err.value.status == 404


def test_invalid_crd_is_rejected(k8s):
    crd = {
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }
    with pytest.raises(ApiException) as err:
        k8s.ext.create_custom_resource_definition(crd)
    assert ("spec.versions[0].schema.openAPIV3Schema", "FieldValueRequired") in causes(err.value)


def test_cluster_scoped_custom_resources_are_served(k8s):
    crd = {
        "metadata": {"name": "globals.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "globals", "kind": "Global"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    k8s.ext.create_custom_resource_definition(crd)
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Global",
        "metadata": {"name": "g"},
        "spec": {"any": 1},
    }
    out = k8s.custom.create_cluster_custom_object("example.com", "v1", "globals", body)
    assert out["spec"] == {"any": 1} and "namespace" not in out["metadata"]


def cel_crd(k8s) -> None:
    spec_schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
            {
                "rule": "!has(self.mode) || self.mode != 'x' || has(self.reason)",
                "reason": "FieldValueRequired",
                "fieldPath": ".reason",
                "message": "reason is required",
            },
            {"rule": "someUnsupportedFunction(self)"},
        ],
        "properties": {
            "min": {"type": "integer"},
            "max": {"type": "integer"},
            "mode": {"type": "string"},
            "reason": {"type": "string"},
            "name": {
                "type": "string",
                "x-kubernetes-validations": [
                    {"rule": "self == oldSelf", "message": "name is immutable"}
                ],
            },
        },
    }
    crd = {
        "metadata": {"name": "ranges.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "ranges", "kind": "Range"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}
                    },
                }
            ],
        },
    }
    k8s.ext.create_custom_resource_definition(crd)


def create_range(k8s, name: str, spec: dict) -> dict:
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Range",
        "metadata": {"name": name},
        "spec": spec,
    }
    return k8s.custom.create_namespaced_custom_object(G, V, k8s.ns, "ranges", body)


def test_cel_rules_reject_invalid_objects_with_their_message(k8s):
    cel_crd(k8s)
    create_range(k8s, "ok", {"min": 1, "max": 2})
    with pytest.raises(ApiException) as err:
        create_range(k8s, "bad", {"min": 3, "max": 2})
    body = json.loads(err.value.body)
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec",
            "message": 'Invalid value: "object": min must not exceed max',
        }
    ]
    with pytest.raises(ApiException) as err:
        create_range(k8s, "bad", {"min": 1, "max": 2, "mode": "x"})
    assert ("spec.reason", "FieldValueRequired") in causes(err.value)


def test_cel_transition_rules_check_updates_only(k8s):
    cel_crd(k8s)
    create_range(k8s, "r", {"min": 1, "max": 2, "name": "a"})
    patch = {"spec": {"name": "b"}}
    with pytest.raises(ApiException) as err:
        k8s.custom.patch_namespaced_custom_object(G, V, k8s.ns, "ranges", "r", patch)
    assert ("spec.name", "FieldValueInvalid") in causes(err.value)
    assert "name is immutable" in err.value.body
