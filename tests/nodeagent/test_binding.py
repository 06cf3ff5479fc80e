"""What the node agent relies on from the API, checked on both backends without an agent.

Real: both backends' `pods/binding` subresource, their Node and Lease kinds, and their
graceful pod deletion (a bound, unfinished pod waits for its kubelet's delete with grace
0; an unbound one goes at once). The real server is the reference: the emulator's
answers must match it word for word. Faked: no node agent runs; the tests play it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from tests.nodeagent.conftest import Cluster, json_of, pod_condition

Obj = dict[str, Any]


def test_binding_assigns_the_pod_and_marks_it_scheduled(kube: Cluster) -> None:
    _create(kube, "p")

    status, body = _bind(kube, "p", {"metadata": {"name": "p"}, "target": {"name": "n1"}})

    assert (status, body["status"], body["code"]) == (201, "Success", 201)
    pod = kube.pod("p") or {}
    assert pod["spec"]["nodeName"] == "n1" and pod_condition(pod, "PodScheduled") == "True"


@pytest.mark.parametrize(
    ("binding", "code", "message"),
    [
        (
            {"target": {"name": "n2"}},
            409,
            'pods/binding "p": pod p is already assigned to node "n1"',
        ),
        ({"target": {"kind": "Pod", "name": "n2"}}, 500, 'target.kind: Unsupported value: "Pod"'),
        ({"target": {}}, 500, "target.name: Required value"),
        ({"metadata": {"name": "q"}, "target": {"name": "n2"}}, 400, "name in URL does not match"),
        ({"metadata": {"uid": "x"}, "target": {"name": "n2"}}, 409, "UID in precondition: x,"),
    ],
    ids=["already-assigned", "not-a-node", "no-node", "other-name", "other-uid"],
)
def test_binding_refusals(kube: Cluster, binding: Obj, code: int, message: str) -> None:
    _create(kube, "p")
    _bind(kube, "p", {"metadata": {"name": "p"}, "target": {"name": "n1"}})

    metadata = {"name": "p", **binding.get("metadata", {})}
    status, body = _bind(kube, "p", {**binding, "metadata": metadata})

    assert (status, body["code"]) == (code, code)
    assert message in body["message"]


def test_a_deleting_pod_cannot_be_bound(kube: Cluster) -> None:
    _create(kube, "p", finalizers=["example.com/hold"])
    kube.core.delete_namespaced_pod("p", kube.ns)

    status, body = _bind(kube, "p", {"metadata": {"name": "p"}, "target": {"name": "n1"}})

    assert status == 409
    assert body["message"].endswith("pod p is being deleted, cannot be assigned to a host")
    _release(kube, "p")


def test_a_bound_pod_waits_for_its_kubelet_to_confirm_deletion(kube: Cluster) -> None:
    _create(kube, "bound")
    _bind(kube, "bound", {"metadata": {"name": "bound"}, "target": {"name": "n1"}})
    _create(kube, "unbound")

    kube.core.delete_namespaced_pod("bound", kube.ns)
    kube.core.delete_namespaced_pod("unbound", kube.ns)

    assert kube.pod("unbound") is None
    waiting = kube.pod("bound") or {}
    assert waiting["metadata"]["deletionTimestamp"]
    assert waiting["metadata"]["deletionGracePeriodSeconds"] == 30
    body = {"gracePeriodSeconds": 0, "preconditions": {"uid": waiting["metadata"]["uid"]}}
    kube.core.delete_namespaced_pod("bound", kube.ns, body=body)
    assert kube.pod("bound") is None


def test_serves_nodes_and_node_leases(kube: Cluster) -> None:
    node = {"metadata": {"name": kube.node_name}, "status": {"capacity": {"pods": "3"}}}
    created = json_of(kube.core.create_node(node, _preload_content=False))
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    kube.core.patch_node_status(kube.node_name, patch)
    lease = {"metadata": {"name": kube.node_name}, "spec": {"holderIdentity": kube.node_name}}
    leases = client.CoordinationV1Api(kube.api)
    leases.create_namespaced_lease("kube-node-lease", lease)
    try:
        stored = kube.core.read_node(kube.node_name)
        assert stored.status.conditions[0].type == "Ready"
        assert created["metadata"]["uid"] == stored.metadata.uid
    finally:
        leases.delete_namespaced_lease(kube.node_name, "kube-node-lease")


def _create(kube: Cluster, name: str, **metadata: Any) -> None:
    container = {"name": "main", "image": "example.com/never-pulled:1"}
    spec = {"containers": [container], "schedulerName": "nobody"}  # no agent may bind it
    pod = {"metadata": {"name": name, **metadata}, "spec": spec}
    kube.core.create_namespaced_pod(kube.ns, pod)


def _bind(kube: Cluster, name: str, body: Obj) -> tuple[int, Obj]:
    try:
        answer = kube.core.create_namespaced_pod_binding(
            name, kube.ns, body, _preload_content=False
        )
    except client.ApiException as exc:
        return int(exc.status), json.loads(exc.body)
    return int(answer.status), json_of(answer)


def _release(kube: Cluster, name: str) -> None:
    kube.core.patch_namespaced_pod(name, kube.ns, {"metadata": {"finalizers": None}})
