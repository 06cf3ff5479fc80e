"""kubectl-specific behaviour: discovery, Table printing, OpenAPI negotiation, apply, errors.

Real: the kubectl binary (v1.32) with only --kubeconfig, HTTP. Faked: nothing.
Skips without kubectl, fails instead when CI is set (see require_kubectl).
"""

from __future__ import annotations

import json

import pytest

import e2e.fixtures as fixtures

pytestmark = pytest.mark.requires_service


@pytest.fixture
def kubectl(kube_emulator, widget_crd):
    def run(*args: str, input: str | None = None, ok: bool = True):
        out = kube_emulator.kubectl(*args, input=input)
        if ok:
            assert out.returncode == 0, out.stderr
        return out

    run("apply", "-f", "-", input=json.dumps(widget_crd))
    return run


def test_get_prints_crd_printer_columns_and_short_names(kubectl):
    doc = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 7},
    }
    kubectl("apply", "-f", "-", input=json.dumps(doc))
    lines = kubectl("get", "wg").stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "PHASE"]
    assert lines[1].split() == ["w", "7"]


def test_api_resources_lists_builtins_and_crds(kubectl):
    out = kubectl("api-resources").stdout
    for needle in (
        "widgets",
        "cronjobs",
        "leases",
        "customresourcedefinitions",
        "events.k8s.io/v1",
    ):
        assert needle in out


def test_version_endpoint(kubectl):
    info = json.loads(kubectl("version", "-o", "json").stdout)
    assert info["serverVersion"]["minor"] == "32"


def test_invalid_object_error_is_shown_like_a_real_server(kubectl):
    doc = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 0},
    }
    out = kubectl("apply", "-f", "-", input=json.dumps(doc), ok=False)
    assert out.returncode != 0
    assert 'The Widget "w" is invalid' in out.stderr and "spec.size" in out.stderr


def test_unknown_field_is_rejected_by_server_side_strict_validation(kubectl):
    doc = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"size": 1, "bogus": True},
    }
    out = kubectl("apply", "-f", "-", input=json.dumps(doc), ok=False)
    assert 'unknown field "spec.bogus"' in out.stderr


def test_create_from_file_and_delete_namespace(kubectl):
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "k"}}),
    )
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "k"},
        "data": {"a": "b"},
    }
    kubectl("create", "-f", "-", input=json.dumps(cm))
    assert json.loads(kubectl("get", "cm", "c", "-n", "k", "-o", "json").stdout)["data"] == {
        "a": "b"
    }
    kubectl("delete", "namespace", "k", "--timeout=20s")
    assert "NotFound" in kubectl("get", "ns", "k", ok=False).stderr


def test_require_kubectl_fails_instead_of_skipping_in_ci(monkeypatch):
    monkeypatch.setattr(fixtures, "KUBECTL", "/nonexistent/kubectl")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        fixtures.require_kubectl()
    for value in ("", "0", "false"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.skip.Exception):
            fixtures.require_kubectl()


def test_typed_generators_send_protobuf_that_is_decoded(kubectl):
    kubectl("create", "namespace", "pb")
    kubectl("create", "configmap", "c", "-n", "pb", "--from-literal=a=b")
    kubectl("create", "secret", "generic", "s", "-n", "pb", "--from-literal=k=v")
    cm = json.loads(kubectl("get", "cm", "c", "-n", "pb", "-o", "json").stdout)
    secret = json.loads(kubectl("get", "secret", "s", "-n", "pb", "-o", "json").stdout)
    assert cm["data"] == {"a": "b"} and "generateName" not in cm["metadata"]
    assert secret["data"] == {"k": "dg=="} and secret["type"] == "Opaque"


def test_unsupported_protobuf_kinds_are_refused_clearly(kubectl):
    out = kubectl("create", "job", "j", "--image", "busybox", ok=False)
    assert "not supported by the emulator" in out.stderr


def test_apply_twice_updates_through_last_applied_configuration(kubectl):
    def apply(doc: dict) -> dict:
        kubectl("apply", "-f", "-", input=json.dumps(doc))
        kind, name = doc["kind"].lower(), doc["metadata"]["name"]
        return json.loads(kubectl("get", kind, name, "-o", "json").stdout)

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    first = apply({**cm, "data": {"a": "1", "b": "2"}})
    kubectl("label", "configmap", "c", "by-hand=yes")  # not in the manifest: kept
    second = apply({**cm, "data": {"a": "3"}})  # b was applied before, so apply removes it
    assert second["data"] == {"a": "3"}
    assert second["metadata"]["labels"] == {"by-hand": "yes"}
    assert second["metadata"]["uid"] == first["metadata"]["uid"]
    last = json.loads(
        second["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
    )
    assert last["data"] == {"a": "3"}

    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    apply({**widget, "spec": {"size": 1, "tags": ["x"]}})
    got = apply({**widget, "spec": {"size": 2}})  # a merge patch for custom resources
    assert got["spec"] == {"size": 2, "color": "red", "limits": {"cpu": "1"}}
