"""The Node the agent registers and the heartbeats that keep it Ready.

Real: both backends (on the real control plane, kube-controller-manager's node
lifecycle controller watches this Node and its Lease), the agent's registration and
heartbeat threads. Faked: nothing; the test agent beats every second (a kubelet: 10 s).
"""

from __future__ import annotations

from kubernetes import client

from e2e.fixtures import eventually
from tests.nodeagent.conftest import Cluster


def test_registers_a_ready_node_with_capacity(cluster: Cluster) -> None:
    node = cluster.core.read_node(cluster.node_name)

    conditions = {c.type: c.status for c in node.status.conditions}
    assert conditions == {
        "Ready": "True",
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    for resources in (node.status.capacity, node.status.allocatable):
        assert {"cpu", "memory", "pods"} <= set(resources)
    assert node.metadata.labels["kubernetes.io/hostname"] == cluster.node_name


def test_the_node_is_not_left_tainted(cluster: Cluster) -> None:
    # The real API server's TaintNodesByCondition admission gives a new Node the
    # `not-ready:NoSchedule` taint; the node lifecycle controller lifts it once it sees
    # the node Ready (and would add NoExecute taints, evicting pods, if the beats stopped).
    eventually(lambda: not cluster.core.read_node(cluster.node_name).spec.taints, timeout=20)


def test_renews_its_lease_and_ready_heartbeat(cluster: Cluster) -> None:
    leases = client.CoordinationV1Api(cluster.api)
    first = leases.read_namespaced_lease(cluster.node_name, "kube-node-lease")
    assert first.spec.holder_identity == cluster.node_name
    assert first.metadata.owner_references[0].kind == "Node"
    beat = _ready(cluster).last_heartbeat_time

    renewed = eventually(
        lambda: (
            leases.read_namespaced_lease(cluster.node_name, "kube-node-lease").spec.renew_time
            > first.spec.renew_time
        ),
        timeout=10,
    )

    assert renewed
    eventually(lambda: _ready(cluster).last_heartbeat_time > beat, timeout=10)


def test_a_deleted_node_is_registered_again(cluster: Cluster) -> None:
    cluster.core.delete_node(cluster.node_name)

    eventually(lambda: _ready(cluster).status == "True", timeout=10)


def _ready(cluster: Cluster) -> client.V1NodeCondition:
    node = cluster.core.read_node(cluster.node_name)
    return next(c for c in node.status.conditions if c.type == "Ready")
