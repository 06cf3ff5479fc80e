"""Object semantics: uid, resourceVersion, generation, generateName and error Statuses.

Real: the HTTP server, the official Python client, JSON on the wire.
Faked: nothing; the emulator's store stands in for etcd.
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException


def cm(name: str, **data: str) -> dict:
    return {"metadata": {"name": name}, "data": data}


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_create_sets_uid_timestamp_and_resource_version(k8s):
    obj = k8s.core.create_namespaced_config_map(k8s.ns, cm("a", x="1"))
    assert obj.metadata.uid and obj.metadata.creation_timestamp
    assert int(obj.metadata.resource_version) > 0
    assert obj.metadata.generation is None  # ConfigMaps have no generation


def test_resource_version_is_one_global_increasing_counter(k8s):
    a = k8s.core.create_namespaced_config_map(k8s.ns, cm("a"))
    b = k8s.core.create_namespaced_secret(k8s.ns, {"metadata": {"name": "b"}})
    c = k8s.core.patch_namespaced_config_map("a", k8s.ns, {"data": {"k": "v"}})
    rvs = [int(o.metadata.resource_version) for o in (a, b, c)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


def test_generate_name_appends_five_random_chars(k8s):
    obj = k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"generateName": "run-"}})
    assert obj.metadata.name.startswith("run-") and len(obj.metadata.name) == len("run-") + 5


def test_create_existing_is_already_exists(k8s):
    k8s.core.create_namespaced_config_map(k8s.ns, cm("a"))
    with pytest.raises(ApiException) as err:
        k8s.core.create_namespaced_config_map(k8s.ns, cm("a"))
    body = status_of(err.value)
    assert err.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "a", "kind": "configmaps"}


def test_stale_resource_version_update_conflicts(k8s):
    first = k8s.core.create_namespaced_config_map(k8s.ns, cm("a", x="1"))
    k8s.core.patch_namespaced_config_map("a", k8s.ns, {"data": {"x": "2"}})
    first.data = {"x": "3"}
    with pytest.raises(ApiException) as err:
        k8s.core.replace_namespaced_config_map("a", k8s.ns, first)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(err.value)["message"]


def test_update_without_resource_version_is_allowed_for_builtins(k8s):
    k8s.core.create_namespaced_config_map(k8s.ns, cm("a", x="1"))
    out = k8s.core.replace_namespaced_config_map("a", k8s.ns, cm("a", x="2"))
    assert out.data == {"x": "2"}


def test_update_without_resource_version_is_invalid_for_custom_resources(widgets):
    widgets.widget("w", {"size": 1})
    body = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 2},
    }
    with pytest.raises(ApiException) as err:
        widgets.custom.replace_namespaced_custom_object(
            "example.com", "v1", widgets.ns, "widgets", "w", body
        )
    cause = status_of(err.value)["details"]["causes"][0]
    assert err.value.status == 422 and cause["field"] == "metadata.resourceVersion"


def test_missing_object_is_not_found(k8s):
    with pytest.raises(ApiException) as err:
        k8s.core.read_namespaced_config_map("nope", k8s.ns)
    body = status_of(err.value)
    assert err.value.status == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'configmaps "nope" not found'


def test_create_in_missing_namespace_is_not_found(k8s):
    with pytest.raises(ApiException) as err:
        k8s.core.create_namespaced_config_map("ghost", cm("a"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "ghost" not found'


def test_invalid_name_lists_field_cause(k8s):
    with pytest.raises(ApiException) as err:
        k8s.core.create_namespaced_config_map(k8s.ns, cm("Bad_Name"))
    body = status_of(err.value)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    assert body["details"]["causes"][0]["reason"] == "FieldValueInvalid"
    assert body["message"].startswith(
        'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value'
    )


def test_noop_update_keeps_resource_version(k8s):
    obj = k8s.core.create_namespaced_config_map(k8s.ns, cm("a", x="1"))
    same = k8s.core.patch_namespaced_config_map("a", k8s.ns, {"data": {"x": "1"}})
    assert same.metadata.resource_version == obj.metadata.resource_version


def test_job_generation_bumps_only_on_spec_change(k8s):
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            },
        },
    }
    created = k8s.batch.create_namespaced_job(k8s.ns, job)
    assert created.metadata.generation == 1
    labelled = k8s.batch.patch_namespaced_job("j", k8s.ns, {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 1
    resumed = k8s.batch.patch_namespaced_job("j", k8s.ns, {"spec": {"suspend": False}})
    assert resumed.metadata.generation == 2


def test_job_gets_generated_selector_and_defaults(k8s):
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1.36"}],
                }
            }
        },
    }
    created = k8s.batch.create_namespaced_job(k8s.ns, job)
    uid = created.metadata.uid
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert created.spec.template.metadata.labels["job-name"] == "j"
    assert created.spec.backoff_limit == 6 and created.spec.completions == 1
    container = created.spec.template.spec.containers[0]
    assert container.termination_message_path == "/dev/termination-log"
    assert container.image_pull_policy == "IfNotPresent"


def test_job_template_without_restart_policy_is_invalid(k8s):
    job = {
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }
    with pytest.raises(ApiException) as err:
        k8s.batch.create_namespaced_job(k8s.ns, job)
    cause = status_of(err.value)["details"]["causes"][0]
    assert cause["field"] == "spec.template.spec.restartPolicy"
    assert cause["reason"] == "FieldValueNotSupported"


def test_job_template_is_immutable(k8s):
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "a"}]}
            },
        },
    }
    k8s.batch.create_namespaced_job(k8s.ns, job)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}}}
    with pytest.raises(ApiException) as err:
        k8s.batch.patch_namespaced_job("j", k8s.ns, patch)
    assert err.value.status == 422 and "field is immutable" in err.value.body


def test_secret_string_data_is_encoded_into_data(k8s):
    out = k8s.core.create_namespaced_secret(
        k8s.ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert out.data == {"k": "dg=="} and out.type == "Opaque"


def test_lease_round_trip(k8s):
    lease = {
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    k8s.coord.create_namespaced_lease(k8s.ns, lease)
    got = k8s.coord.read_namespaced_lease("leader", k8s.ns)
    got.spec.holder_identity = "b"
    assert k8s.coord.replace_namespaced_lease("leader", k8s.ns, got).spec.holder_identity == "b"


def test_new_namespace_gets_default_service_account(k8s):
    from e2e.fixtures import eventually

    assert eventually(lambda: k8s.core.read_namespaced_service_account("default", k8s.ns))


def test_events_are_one_object_in_both_event_apis(k8s):
    from kubernetes import client

    events_v1 = client.EventsV1Api(k8s.emu.api_client())
    body = {
        "metadata": {"name": "e1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "longrun.dev/controller",
        "reportingInstance": "controller-0",
        "action": "Reconcile",
        "reason": "Started",
        "type": "Normal",
        "note": "run started",
        "regarding": {"kind": "ConfigMap", "name": "x", "namespace": k8s.ns},
    }
    events_v1.create_namespaced_event(k8s.ns, body)
    core = k8s.core.read_namespaced_event("e1", k8s.ns)
    assert (core.message, core.involved_object.name, core.reporting_component) == (
        "run started",
        "x",
        "longrun.dev/controller",
    )
    selected = k8s.core.list_namespaced_event(k8s.ns, field_selector="involvedObject.name=x").items
    assert [e.metadata.name for e in selected] == ["e1"]
    assert events_v1.list_namespaced_event(k8s.ns).items[0].note == "run started"


def test_events_v1_requires_its_fields(k8s):
    from kubernetes import client

    api = client.EventsV1Api(k8s.emu.api_client())
    with pytest.raises(ApiException) as err:
        api.create_namespaced_event(
            k8s.ns, {"metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00.000000Z"}
        )
    fields = {c["field"] for c in status_of(err.value)["details"]["causes"]}
    assert {"reportingController", "action", "reason"} <= fields


def post(k8s, path: str, body: dict, *, query: str = ""):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{k8s.emu.url}{path}{query}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get_all("Warning") or [], json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, [], json.loads(err.read())


def test_unknown_fields_of_builtins_are_dropped_with_a_warning(k8s):
    body = {"metadata": {"name": "c", "bogus": 1}, "data": {"a": "b"}, "extra": True}
    code, warnings, obj = post(k8s, f"/api/v1/namespaces/{k8s.ns}/configmaps", body)
    assert code == 201 and "extra" not in obj and "bogus" not in obj["metadata"]
    assert warnings == [
        '299 - "unknown field \\"metadata.bogus\\""',
        '299 - "unknown field \\"extra\\""',
    ]


def test_strict_field_validation_rejects_unknown_builtin_fields(k8s):
    body = {"metadata": {"name": "c"}, "extra": True}
    code, _, status = post(
        k8s, f"/api/v1/namespaces/{k8s.ns}/configmaps", body, query="?fieldValidation=Strict"
    )
    assert code == 400 and 'strict decoding error: unknown field "extra"' in status["message"]


def test_wrong_json_type_in_builtin_is_bad_request(k8s):
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "backoffLimit": "3",
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            },
        },
    }
    code, _, status = post(k8s, f"/apis/batch/v1/namespaces/{k8s.ns}/jobs", job)
    assert (
        code == 400
        and "cannot unmarshal string into Go struct field spec.backoffLimit" in status["message"]
    )


def test_quantities_accept_numbers_and_are_canonicalised(k8s):
    limits = {"cpu": 1, "memory": "64Mi", "nvidia.com/gpu": "2000m"}
    container = {
        "name": "c",
        "image": "x",
        "resources": {"limits": limits, "requests": {"cpu": 0.5}},
    }
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [container]}}
    code, _, obj = post(k8s, f"/api/v1/namespaces/{k8s.ns}/pods", pod)
    assert code == 201
    assert obj["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1", "memory": "64Mi", "nvidia.com/gpu": "2"},
        # A pod's missing requests default to its limits.
        "requests": {"cpu": "500m", "memory": "64Mi", "nvidia.com/gpu": "2"},
    }


def test_pod_qos_class_follows_requests_and_limits(k8s):
    def qos(name: str, *resources: dict) -> str:
        containers = [
            {"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)
        ]
        body = {"metadata": {"name": name}, "spec": {"containers": containers}}
        return k8s.core.create_namespaced_pod(k8s.ns, body).status.qos_class

    both = {"cpu": "1", "memory": "1Gi"}
    assert qos("none", {}) == "BestEffort"
    assert qos("zero", {"requests": {"cpu": "0"}}) == "BestEffort"
    assert qos("limits", {"limits": both}) == "Guaranteed"  # requests default to limits
    assert qos("equal", {"limits": both, "requests": {"cpu": "1000m", "memory": "1024Mi"}}) == (
        "Guaranteed"
    )
    assert qos("cpu-only", {"limits": {"cpu": "1"}}) == "Burstable"
    assert qos("lower", {"limits": both, "requests": {"cpu": "500m"}}) == "Burstable"
    assert qos("mixed", {"limits": both}, {}) == "Burstable"


def test_client_leader_election_acquires_a_lease(k8s):
    from kubernetes import client
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    lock = LeaseLock("longrun-leader", k8s.ns, "candidate-a")
    lock.api_instance = client.CoordinationV1Api(k8s.emu.api_client())
    seen: list[str] = []

    def lead() -> None:
        seen.append(k8s.coord.read_namespaced_lease("longrun-leader", k8s.ns).spec.holder_identity)
        raise RuntimeError("done leading")  # ends the renew loop: run() returns

    config = electionconfig.Config(
        lock,
        lease_duration=3,
        renew_deadline=2,
        retry_period=1,
        onstarted_leading=lead,
        onstopped_leading=lambda: seen.append("stopped"),
    )
    leaderelection.LeaderElection(config).run()
    assert seen == ["candidate-a", "stopped"]


def test_dry_run_create_persists_nothing(k8s):
    out = k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "a"}}, dry_run="All")
    assert out.metadata.uid
    assert not k8s.core.list_namespaced_config_map(k8s.ns).items


def test_namespace_status_subresource_is_routed_to_the_namespace(k8s):
    out = k8s.core.patch_namespace_status(k8s.ns, {"status": {"phase": "Active"}})
    assert out.metadata.name == k8s.ns and out.status.phase == "Active"
