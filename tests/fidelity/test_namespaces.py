"""Namespaces: what a new one holds, and what a terminating one refuses.

Real: both backends; on the real one the ServiceAccount, root-CA publisher and namespace
controllers of kube-controller-manager. Faked: nothing. Every e2e test works in a fresh
namespace, so what appears in one by itself must be known.
"""

from __future__ import annotations

from tests.fidelity.conftest import GROUP, VERSION, Cluster, wait_for

HOLD = "fidelity.longrun.dev/hold"


def test_a_new_namespace_gets_a_default_service_account(kube: Cluster) -> None:
    kube.handle.require_controllers()
    names = wait_for(
        lambda: [
            sa.metadata.name for sa in kube.core.list_namespaced_service_account(kube.ns).items
        ],
        what="default ServiceAccount",
    )
    assert names == ["default"]


def test_what_config_maps_a_new_namespace_holds(kube: Cluster) -> None:
    kube.handle.require_controllers()
    if kube.is_real:  # the root-CA publisher of kube-controller-manager
        published = wait_for(
            lambda: kube.core.list_namespaced_config_map(kube.ns).items, what="kube-root-ca.crt"
        )
        assert [c.metadata.name for c in published] == ["kube-root-ca.crt"]
        assert list(published[0].data) == ["ca.crt"]
    else:  # Known divergence: the emulator publishes no kube-root-ca.crt
        assert kube.core.list_namespaced_config_map(kube.ns).items == []


def test_a_terminating_namespace_refuses_new_objects(kube: Cluster) -> None:
    held = {"metadata": {"name": "held", "finalizers": [HOLD]}}
    kube.core.create_namespaced_config_map(kube.ns, held)
    kube.core.delete_namespace(kube.ns)
    phase = kube.core.read_namespace(kube.ns).status.phase
    assert phase == "Terminating"
    answer = kube.raw(
        "POST", f"/api/v1/namespaces/{kube.ns}/configmaps", {"metadata": {"name": "late"}}
    )
    assert (answer.status, answer.body["reason"]) == (403, "Forbidden")
    assert answer.body["message"] == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {kube.ns} '
        "because it is being terminated"
    )
    generated = kube.raw(
        "POST", f"/api/v1/namespaces/{kube.ns}/configmaps", {"metadata": {"generateName": "g-"}}
    )
    assert generated.body["message"].startswith('configmaps "g-" is forbidden')  # as requested
    run = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun",
           "metadata": {"name": "late"}, "spec": {"configRef": {"name": "iris"}}}  # fmt: skip
    custom = kube.raw("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns", run)
    assert custom.status == 403
    assert custom.body["message"].startswith('inferenceruns.longrun.dev "late" is forbidden')
    assert custom.body["details"]["causes"] == [{
        "reason": "NamespaceTerminating", "field": "metadata.namespace",
        "message": f"namespace {kube.ns} is being terminated"}]  # fmt: skip
    kube.core.patch_namespaced_config_map("held", kube.ns, {"metadata": {"finalizers": None}})
