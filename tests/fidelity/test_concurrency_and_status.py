"""Optimistic concurrency (409 on a stale resourceVersion), metadata.generation, and the
status subresource, on both backends.

Real: the emulator and kube-apiserver (when found), the official Python client. Faked:
nothing. The controller relies on every rule here: it patches status only through
`/status`, reads `observedGeneration` against `generation`, and retries on 409.
"""

from __future__ import annotations

from typing import Any

from tests.fidelity.conftest import GROUP, VERSION, Cluster

MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
SCHEDULED = {"configRef": {"name": "iris"}, "schedule": "0 2 * * *"}  # a spec that may change


def conflict(resource: str, name: str) -> str:
    return f'Operation cannot be fulfilled on {resource} "{name}": {MODIFIED}'


def _config_map(kube: Cluster, name: str) -> Any:
    body = {"metadata": {"name": name}, "data": {"a": "1"}}
    return kube.core.create_namespaced_config_map(kube.ns, body)


def test_replace_with_a_stale_resource_version_conflicts(kube: Cluster) -> None:
    stale = _config_map(kube, "cm").metadata.resource_version
    kube.core.patch_namespaced_config_map("cm", kube.ns, {"data": {"a": "2"}})
    body = {"metadata": {"name": "cm", "resourceVersion": stale}, "data": {"a": "3"}}
    code, status = kube.refusal(
        lambda: kube.core.replace_namespaced_config_map("cm", kube.ns, body)
    )
    assert (code, status["reason"]) == (409, "Conflict")
    assert status["message"] == conflict("configmaps", "cm")
    assert status["details"] == {"name": "cm", "kind": "configmaps"}


def test_custom_resource_replace_with_a_stale_resource_version_conflicts(kube: Cluster) -> None:
    run = kube.create_run("nightly", SCHEDULED)
    patch = {"spec": {"suspend": True}}
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, kube.ns, "inferenceruns", "nightly", patch
    )
    run["spec"]["suspend"] = False  # still carries the first resourceVersion
    code, status = kube.refusal(
        lambda: kube.custom.replace_namespaced_custom_object(
            GROUP, VERSION, kube.ns, "inferenceruns", "nightly", run
        )
    )
    assert (code, status["reason"]) == (409, "Conflict")
    assert status["message"] == conflict("inferenceruns.longrun.dev", "nightly")
    assert status["details"] == {"name": "nightly", "group": GROUP, "kind": "inferenceruns"}


def test_merge_patch_carrying_a_stale_resource_version_conflicts(kube: Cluster) -> None:
    stale = _config_map(kube, "cm").metadata.resource_version
    kube.core.patch_namespaced_config_map("cm", kube.ns, {"data": {"a": "2"}})
    answer = kube.raw(
        "PATCH",
        f"/api/v1/namespaces/{kube.ns}/configmaps/cm",
        {"metadata": {"resourceVersion": stale}, "data": {"a": "3"}},
        content_type="application/merge-patch+json",
    )
    assert (answer.status, answer.body["message"]) == (409, conflict("configmaps", "cm"))


def test_delete_with_a_stale_resource_version_precondition_conflicts(kube: Cluster) -> None:
    stale = _config_map(kube, "cm").metadata.resource_version
    current = kube.core.patch_namespaced_config_map("cm", kube.ns, {"data": {"a": "2"}})
    options = {"preconditions": {"resourceVersion": stale}}
    answer = kube.raw("DELETE", f"/api/v1/namespaces/{kube.ns}/configmaps/cm", options)
    assert (answer.status, answer.body["reason"]) == (409, "Conflict")
    assert answer.body["message"] == (  # the kind, not the resource: rest.BeforeDelete
        'Operation cannot be fulfilled on ConfigMap "cm": the ResourceVersion in the '
        f"precondition ({stale}) does not match the ResourceVersion in record "
        f"({current.metadata.resource_version}). The object might have been modified"
    )
    assert answer.body["details"] == {"name": "cm", "kind": "ConfigMap"}


def test_delete_with_another_uid_precondition_conflicts(kube: Cluster) -> None:
    run = kube.create_run("nightly", SCHEDULED)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns/nightly"
    answer = kube.raw("DELETE", path, {"preconditions": {"uid": "not-the-uid"}})
    assert (answer.status, answer.body["reason"]) == (409, "Conflict")
    assert answer.body["message"] == (
        'Operation cannot be fulfilled on InferenceRun.longrun.dev "nightly": the UID in the '
        f"precondition (not-the-uid) does not match the UID in record ({run['metadata']['uid']})."
        " The object might have been deleted and then recreated"
    )


def test_custom_resources_need_a_resource_version_to_be_replaced(kube: Cluster) -> None:
    run = kube.create_run("nightly", SCHEDULED)
    del run["metadata"]["resourceVersion"]
    code, status = kube.refusal(
        lambda: kube.custom.replace_namespaced_custom_object(
            GROUP, VERSION, kube.ns, "inferenceruns", "nightly", run
        )
    )
    assert code == 422
    assert status["message"] == (
        'inferenceruns.longrun.dev "nightly" is invalid: metadata.resourceVersion: '
        "Invalid value: 0: must be specified for an update"
    )


def test_built_ins_are_replaced_unconditionally_without_a_resource_version(kube: Cluster) -> None:
    _config_map(kube, "cm")
    body = {"metadata": {"name": "cm"}, "data": {"a": "9"}}
    replaced = kube.core.replace_namespaced_config_map("cm", kube.ns, body)
    assert replaced.data == {"a": "9"}


def test_generation_moves_with_the_spec_only(kube: Cluster) -> None:
    created = kube.create_run("nightly", SCHEDULED, labels={"a": "1"})
    assert created["metadata"]["generation"] == 1

    def patch(body: dict[str, Any], *, status: bool = False) -> Any:
        call = (
            kube.custom.patch_namespaced_custom_object_status
            if status
            else kube.custom.patch_namespaced_custom_object
        )
        return call(GROUP, VERSION, kube.ns, "inferenceruns", "nightly", body)

    assert patch({"spec": {"suspend": True}})["metadata"]["generation"] == 2
    relabelled = patch({"metadata": {"labels": {"a": "2"}}})
    assert relabelled["metadata"]["generation"] == 2
    with_status = patch({"status": {"phase": "Scheduled"}}, status=True)
    assert with_status["metadata"]["generation"] == 2
    assert with_status["metadata"]["resourceVersion"] != relabelled["metadata"]["resourceVersion"]
    unchanged = patch({"spec": {"suspend": True}})  # the same value again: no new generation
    assert unchanged["metadata"]["generation"] == 2


def test_status_subresource_ignores_spec_changes(kube: Cluster) -> None:
    run = kube.create_run("nightly", SCHEDULED)
    run["spec"]["suspend"] = True
    run["status"] = {"phase": "Scheduled"}
    written = kube.custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, kube.ns, "inferenceruns", "nightly", run
    )
    assert written["status"] == {"phase": "Scheduled"}
    assert written["spec"]["suspend"] is False  # the default, as created
    assert written["metadata"]["generation"] == 1


def test_main_resource_ignores_status_changes(kube: Cluster) -> None:
    run = kube.create_run("nightly", SCHEDULED, labels={"a": "1"})
    patch = {"metadata": {"labels": {"a": "2"}}, "status": {"phase": "Failed"}}
    written = kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, kube.ns, "inferenceruns", "nightly", patch
    )
    assert written["metadata"]["labels"] == {"a": "2"}
    assert "status" not in written
    assert "status" not in run


def test_status_sent_on_create_is_dropped(kube: Cluster) -> None:
    created = kube.create_run("nightly", SCHEDULED)
    assert "status" not in created
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun",
            "metadata": {"name": "with-status"}, "spec": SCHEDULED,
            "status": {"phase": "Succeeded"}}  # fmt: skip
    created = kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, kube.ns, "inferenceruns", body
    )
    assert "status" not in created


def test_status_writes_are_validated_and_pruned_by_the_schema(kube: Cluster) -> None:
    kube.create_run("nightly", SCHEDULED)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns/nightly/status"
    merge = "application/merge-patch+json"
    bad = kube.raw("PATCH", path, {"status": {"phase": "Sleeping"}}, content_type=merge)
    assert bad.status == 422
    assert 'status.phase: Unsupported value: "Sleeping"' in bad.body["message"]
    pruned = kube.raw(
        "PATCH", path, {"status": {"phase": "Scheduled", "mood": "good"}}, content_type=merge
    )
    assert pruned.status == 200
    assert pruned.body["status"] == {"phase": "Scheduled"}
    assert pruned.headers.get("Warning") == '299 - "unknown field \\"status.mood\\""'
