"""PodSecurity admission keeps violating pods from ever reaching the node agent.

Real: kube-apiserver's PodSecurity admission (`restricted` enforced by namespace
label), kube-controller-manager's Job controller whose pod creations it refuses, the
agent serving that namespace. Faked: nothing. Real control plane only: the emulator
has no PodSecurity admission yet (issue 20, item 5).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from e2e.fixtures import eventually
from tests.nodeagent.conftest import Cluster

RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_a_pod_violating_restricted_never_reaches_the_agent(real_kube: Cluster) -> None:
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    real_kube.core.patch_namespace(real_kube.ns, {"metadata": {"labels": labels}})
    agent = real_kube.start_agent()

    with pytest.raises(client.ApiException) as refused:
        real_kube.create_pod("loose", "pass")
    real_kube.create_job("loose-job", "pass")
    failed = eventually(lambda: _failed_create(real_kube, "loose-job"), timeout=30)
    real_kube.create_pod(
        "tight",
        "pass",
        securityContext=RESTRICTED_POD,
        container={"securityContext": RESTRICTED_CONTAINER},
    )
    real_kube.wait_phase("tight", "Succeeded")

    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in json.loads(refused.value.body)["message"]
    assert "violates PodSecurity" in failed
    assert {key for key in agent.seen if key.startswith(f"{real_kube.ns}/")} == {
        f"{real_kube.ns}/tight"
    }


def _failed_create(cluster: Cluster, job: str) -> str:
    events = cluster.core.list_namespaced_event(
        cluster.ns, field_selector=f"involvedObject.name={job},reason=FailedCreate"
    )
    return " ".join(e.message for e in events.items)
