"""Deletion: propagation policies, owner-reference GC, finalizers, namespace and CRD cleanup.

Real: HTTP DELETE with query parameters and DeleteOptions bodies (both forms the
clients send), the official Python client. Faked: the garbage collector runs in
the emulator process instead of kube-controller-manager.
"""

from __future__ import annotations

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from e2e.fixtures import eventually


def exists(k8s, name: str) -> bool:
    try:
        k8s.core.read_namespaced_config_map(name, k8s.ns)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def owner_and_child(k8s, *, block: bool = False) -> tuple[str, str]:
    owner = k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": block,
    }
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "child", "ownerReferences": [ref]}}
    )
    return "owner", "child"


def test_background_deletion_removes_owner_then_dependents(k8s):
    owner_and_child(k8s)
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Background")
    assert not exists(k8s, "owner")
    eventually(lambda: not exists(k8s, "child"))


def test_orphan_deletion_keeps_dependents_and_strips_owner_refs(k8s):
    owner_and_child(k8s)
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, body={"propagationPolicy": "Orphan"})
    eventually(lambda: not exists(k8s, "owner"))
    child = k8s.core.read_namespaced_config_map("child", k8s.ns)
    assert not child.metadata.owner_references


def test_foreground_deletion_waits_for_blocking_dependents(k8s):
    owner_and_child(k8s, block=True)
    child = k8s.core.read_namespaced_config_map("child", k8s.ns)
    k8s.core.patch_namespaced_config_map(
        "child", k8s.ns, {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Foreground")
    owner = k8s.core.read_namespaced_config_map("owner", k8s.ns)
    assert owner.metadata.deletion_timestamp and "foregroundDeletion" in owner.metadata.finalizers
    eventually(
        lambda: k8s.core.read_namespaced_config_map("child", k8s.ns).metadata.deletion_timestamp
    )
    assert exists(k8s, "owner")  # blocked by the child's finalizer
    k8s.core.patch_namespaced_config_map("child", k8s.ns, {"metadata": {"finalizers": None}})
    eventually(lambda: not exists(k8s, "owner") and not exists(k8s, "child"))
    assert child.metadata.uid


def test_finalizers_keep_object_until_removed(k8s):
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "f", "finalizers": ["example.com/x"]}}
    )
    resp = k8s.core.delete_namespaced_config_map("f", k8s.ns)
    assert resp is not None
    obj = k8s.core.read_namespaced_config_map("f", k8s.ns)
    assert obj.metadata.deletion_timestamp and obj.metadata.finalizers == ["example.com/x"]
    k8s.core.patch_namespaced_config_map("f", k8s.ns, {"metadata": {"finalizers": None}})
    assert not exists(k8s, "f")


def test_no_new_finalizers_while_deleting(k8s):
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "f", "finalizers": ["example.com/x"]}}
    )
    k8s.core.delete_namespaced_config_map("f", k8s.ns)
    with pytest.raises(ApiException) as err:
        k8s.core.patch_namespaced_config_map(
            "f", k8s.ns, {"metadata": {"finalizers": ["example.com/x", "example.com/y"]}}
        )
    assert err.value.status == 422


def test_deletion_precondition_mismatch_conflicts(k8s):
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as err:
        k8s.core.delete_namespaced_config_map("a", k8s.ns, body={"preconditions": {"uid": "wrong"}})
    assert err.value.status == 409


def test_custom_resource_deletion_sets_timestamp_and_bumps_generation(widgets):
    w = widgets.widget("w", {"size": 1}, finalizers=["example.com/cleanup"])
    widgets.custom.delete_namespaced_custom_object("example.com", "v1", widgets.ns, "widgets", "w")
    got = widgets.get_widget("w")
    assert got["metadata"]["deletionTimestamp"]
    assert got["metadata"]["generation"] == w["metadata"]["generation"] + 1


def job_with_pod(k8s) -> None:
    k8s.emu.executor.script(job="j", hold=True)
    body = {
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                }
            }
        },
    }
    k8s.batch.create_namespaced_job(k8s.ns, body)
    eventually(
        lambda: [
            p
            for p in k8s.core.list_namespaced_pod(k8s.ns, label_selector="job-name=j").items
            if p.status.phase == "Running"
        ]
    )


def test_job_delete_without_policy_orphans_pods_with_warning(k8s):
    job_with_pod(k8s)
    k8s.batch.delete_namespaced_job("j", k8s.ns)
    eventually(lambda: not k8s.batch.list_namespaced_job(k8s.ns).items)
    pods = k8s.core.list_namespaced_pod(k8s.ns, label_selector="job-name=j").items
    assert len(pods) == 1 and not pods[0].metadata.owner_references


def test_job_delete_with_background_policy_deletes_pods(k8s):
    job_with_pod(k8s)
    k8s.batch.delete_namespaced_job("j", k8s.ns, propagation_policy="Background")
    eventually(lambda: not k8s.core.list_namespaced_pod(k8s.ns).items)
    assert k8s.emu.executor.killed and "j" in k8s.emu.executor.killed[0]


def test_namespace_deletion_empties_it_then_disappears(k8s):
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "a", "finalizers": ["example.com/x"]}}
    )
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "b"}})
    k8s.core.delete_namespace(k8s.ns)
    assert k8s.core.read_namespace(k8s.ns).status.phase == "Terminating"
    eventually(lambda: not exists(k8s, "b") and k8s.core.read_namespace(k8s.ns))
    k8s.core.patch_namespaced_config_map("a", k8s.ns, {"metadata": {"finalizers": None}})

    def gone() -> bool:
        try:
            k8s.core.read_namespace(k8s.ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    eventually(gone)


def test_create_in_terminating_namespace_is_forbidden(k8s):
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "a", "finalizers": ["example.com/x"]}}
    )
    k8s.core.delete_namespace(k8s.ns)
    with pytest.raises(ApiException) as err:
        k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "b"}})
    assert err.value.status == 403


def test_dependent_with_missing_owner_is_collected(k8s):
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "ghost",
        "uid": "00000000-0000-0000-0000-000000000000",
    }
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "orphan", "ownerReferences": [ref]}}
    )
    eventually(lambda: not exists(k8s, "orphan"))


def test_dry_run_delete_keeps_the_object(k8s):
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "a"}})
    k8s.core.delete_namespaced_config_map("a", k8s.ns, body={"dryRun": ["All"]})
    k8s.core.delete_namespaced_config_map("a", k8s.ns, dry_run="All")
    assert exists(k8s, "a")


def ref_to(obj, *, block: bool = True) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "blockOwnerDeletion": block,
    }


def test_foreground_deletion_keeps_dependent_with_another_live_owner(k8s):
    a = k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "a"}})
    b = k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "b"}})
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "child", "ownerReferences": [ref_to(a), ref_to(b)]}}
    )
    k8s.core.delete_namespaced_config_map("a", k8s.ns, propagation_policy="Foreground")
    eventually(lambda: not exists(k8s, "a"))
    child = k8s.core.read_namespaced_config_map("child", k8s.ns)
    assert [r.uid for r in child.metadata.owner_references] == [b.metadata.uid]
    assert not child.metadata.deletion_timestamp


def test_foreground_deletes_leaf_dependents_in_background(k8s):
    owner_and_child(k8s, block=True)
    k8s.core.patch_namespaced_config_map(
        "child", k8s.ns, {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Foreground")
    eventually(
        lambda: k8s.core.read_namespaced_config_map("child", k8s.ns).metadata.deletion_timestamp
    )
    k8s.emu.emulator.wait_idle()
    stream = watch.Watch().stream(
        k8s.core.list_namespaced_config_map,
        k8s.ns,
        field_selector="metadata.name=child",
        resource_version=rv,
        timeout_seconds=1,
    )
    seen = [e["object"].metadata.finalizers for e in stream]
    assert seen == [["example.com/hold"]]  # deleted once, never given foregroundDeletion


def test_foreground_deletes_dependents_with_dependents_in_foreground(k8s):
    _, _ = owner_and_child(k8s, block=True)
    child = k8s.core.read_namespaced_config_map("child", k8s.ns)
    k8s.core.create_namespaced_config_map(
        k8s.ns,
        {
            "metadata": {
                "name": "grandchild",
                "ownerReferences": [ref_to(child)],
                "finalizers": ["example.com/hold"],
            }
        },
    )
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Foreground")
    eventually(
        lambda: (
            "foregroundDeletion"
            in (k8s.core.read_namespaced_config_map("child", k8s.ns).metadata.finalizers or [])
        )
    )
    assert exists(k8s, "owner")
    k8s.core.patch_namespaced_config_map("grandchild", k8s.ns, {"metadata": {"finalizers": None}})
    eventually(lambda: not any(exists(k8s, n) for n in ("owner", "child", "grandchild")))


def test_delete_answers_200_while_finalizers_hold_the_object(k8s):
    k8s.core.create_namespaced_config_map(
        k8s.ns, {"metadata": {"name": "f", "finalizers": ["example.com/x"]}}
    )
    _, status, _ = k8s.core.delete_namespaced_config_map_with_http_info("f", k8s.ns)
    assert status == 200
    _, status, _ = k8s.core.delete_namespaced_config_map_with_http_info(
        "f", k8s.ns, body={"orphanDependents": False}
    )
    assert status == 202  # only an explicit orphanDependents=false gets Accepted


def test_second_delete_with_orphan_policy_orphans_dependents(k8s):
    owner_and_child(k8s)
    k8s.core.patch_namespaced_config_map(
        "owner", k8s.ns, {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Background")
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Orphan")
    eventually(
        lambda: not k8s.core.read_namespaced_config_map("child", k8s.ns).metadata.owner_references
    )
    k8s.core.patch_namespaced_config_map("owner", k8s.ns, {"metadata": {"finalizers": None}})
    eventually(lambda: not exists(k8s, "owner"))
    k8s.emu.emulator.wait_idle()
    assert exists(k8s, "child")


def test_second_delete_with_background_policy_ends_foreground_wait(k8s):
    owner_and_child(k8s, block=True)
    k8s.core.patch_namespaced_config_map(
        "child", k8s.ns, {"metadata": {"finalizers": ["example.com/hold"]}}
    )
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Foreground")
    assert exists(k8s, "owner")
    k8s.core.delete_namespaced_config_map("owner", k8s.ns, propagation_policy="Background")
    assert not exists(k8s, "owner")  # foregroundDeletion was its only finalizer
