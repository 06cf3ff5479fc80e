"""Owner references and the garbage collector: background, foreground and orphan deletion.

Real: both backends; on the real one the garbage collector of kube-controller-manager
(skipped, naming what is missing, when the assets lack it), on the emulator its own GC.
Faked: nothing. A run owns its contract ConfigMap and its Job; deleting the run must take
them along, and the Job its pods.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.fidelity.conftest import GROUP, VERSION, Cluster, wait_for

ONE_SHOT = {"configRef": {"name": "iris"}}


# kube-controller-manager's garbage collector learns new resource types (our CRDs, installed
# at session start) by re-reading discovery every 30 s: until then it cannot look up a run.
GC_TIMEOUT = 60.0


@pytest.fixture(autouse=True)
def _controllers(kube: Cluster) -> None:
    kube.handle.require_controllers()


def owner_reference(owner: dict[str, Any], **extra: Any) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
            "name": meta["name"], "uid": meta["uid"], **extra}  # fmt: skip


def _dependent(kube: Cluster, name: str, owner: dict[str, Any], **extra: Any) -> None:
    meta = {"name": name, "ownerReferences": [owner_reference(owner, **extra)]}
    kube.core.create_namespaced_config_map(kube.ns, {"metadata": meta})


def _job(kube: Cluster, name: str, owner: dict[str, Any]) -> None:
    container = {"name": "runner", "image": "busybox", "command": ["true"]}
    meta = {"name": name, "ownerReferences": [owner_reference(owner, controller=True)]}
    spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    kube.batch.create_namespaced_job(kube.ns, {"metadata": meta, "spec": spec})


def _exists(read: Any, *args: Any) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _config_map_exists(kube: Cluster, name: str) -> bool:
    return _exists(kube.core.read_namespaced_config_map, name, kube.ns)


def _delete_run(kube: Cluster, name: str, policy: str) -> Any:
    return kube.custom.delete_namespaced_custom_object(
        GROUP, VERSION, kube.ns, "inferenceruns", name, propagation_policy=policy
    )


def test_background_deletion_takes_the_dependents_along(kube: Cluster) -> None:
    run = kube.create_run("once", ONE_SHOT)
    _dependent(kube, "once-contract", run, controller=True, blockOwnerDeletion=True)
    _job(kube, "once", run)
    _delete_run(kube, "once", "Background")
    assert not _exists(
        kube.custom.get_namespaced_custom_object, GROUP, VERSION, kube.ns, "inferenceruns", "once"
    )
    wait_for(
        lambda: not _config_map_exists(kube, "once-contract"),
        what="ConfigMap collected",
        timeout=GC_TIMEOUT,
    )
    wait_for(
        lambda: not _exists(kube.batch.read_namespaced_job, "once", kube.ns),
        what="Job collected",
        timeout=GC_TIMEOUT,
    )


def test_foreground_deletion_waits_for_the_dependents(kube: Cluster) -> None:
    run = kube.create_run("once", ONE_SHOT)
    _dependent(kube, "blocking", run, blockOwnerDeletion=True)
    deleting = _delete_run(kube, "once", "Foreground")
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    wait_for(
        lambda: not _config_map_exists(kube, "blocking"),
        what="dependent collected",
        timeout=GC_TIMEOUT,
    )
    wait_for(
        lambda: not _exists(
            kube.custom.get_namespaced_custom_object,
            GROUP, VERSION, kube.ns, "inferenceruns", "once",
        ),
        what="owner gone after its dependents",
        timeout=GC_TIMEOUT,
    )  # fmt: skip


def test_orphan_deletion_leaves_the_dependents_unowned(kube: Cluster) -> None:
    run = kube.create_run("once", ONE_SHOT)
    _dependent(kube, "kept", run)
    _delete_run(kube, "once", "Orphan")

    def unowned() -> bool:
        meta = kube.core.read_namespaced_config_map("kept", kube.ns).metadata
        return not meta.owner_references

    wait_for(unowned, what="owner reference removed", timeout=GC_TIMEOUT)
    wait_for(
        lambda: not _exists(
            kube.custom.get_namespaced_custom_object,
            GROUP, VERSION, kube.ns, "inferenceruns", "once",
        ),
        what="owner gone",
        timeout=GC_TIMEOUT,
    )  # fmt: skip


def test_a_dependent_whose_owner_never_existed_is_collected(kube: Cluster) -> None:
    never = {"name": "ghost", "uid": "00000000-0000-0000-0000-000000000001"}
    ghost = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun", "metadata": never}
    _dependent(kube, "dangling", ghost)
    wait_for(
        lambda: not _config_map_exists(kube, "dangling"),
        what="dangling dependent collected",
        timeout=GC_TIMEOUT,
    )


def test_a_dependent_with_one_live_owner_is_kept(kube: Cluster) -> None:
    first = kube.create_run("first", ONE_SHOT)
    second = kube.create_run("second", ONE_SHOT)
    refs = [owner_reference(first), owner_reference(second)]
    kube.core.create_namespaced_config_map(
        kube.ns, {"metadata": {"name": "shared", "ownerReferences": refs}}
    )
    _delete_run(kube, "first", "Background")

    def only_second_left() -> bool:
        meta = kube.core.read_namespaced_config_map("shared", kube.ns).metadata
        return [r.name for r in meta.owner_references or []] == ["second"]

    wait_for(only_second_left, what="the deleted owner's reference removed", timeout=GC_TIMEOUT)
