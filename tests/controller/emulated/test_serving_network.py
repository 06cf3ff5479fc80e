"""Model-server pods get the runners' network guard as a NetworkPolicy, on either backend: the
denied networks closed to them (deny mode), or only what the egress allow-list names; and a
deployment that claims what the allow-lists refuse (an Ingress host, a LoadBalancer) is
reported with the field and the setting, and gets none of it.

Real: the backend (the emulator, or kube-apiserver, which validates each ipBlock: an
`except` must be a strict part of its `cidr`), the official client, the whole controller
with its settings read from the environment as the chart sets them. Faked: nothing the
assertions read; the pods themselves (the node agent runs them scripted) do not matter here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from e2e.fixtures import eventually
from tests.controller.emulated.harness import Env
from tests.controller.emulated.serving import GGUF, Serving, plain

CHART_DENIED = "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32"
DNS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
V4 = {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["100.100.100.200/32", "169.254.0.0/16"]}}
V6 = {
    "ipBlock": {
        "cidr": "::/0",
        "except": [
            "64:ff9b::6464:64c8/128", "64:ff9b::a9fe:0/112", "2002:6464:64c8::/48",
            "2002:a9fe::/32", "fd00:ec2::254/128", "fe80::/10",
        ],
    }
}  # fmt: skip
Obj = dict[str, Any]


@pytest.fixture
def serving(env: Env) -> Serving:
    return Serving(env)


def policy(serving: Serving, name: str) -> Obj | None:
    try:
        return plain(serving.net.read_namespaced_network_policy(f"{name}-auth", serving.ns))
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_server_pods_are_kept_from_the_denied_networks(
    env: Env, serving: Serving, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DENIED_CIDRS", CHART_DENIED)
    env.start()
    serving.create("chat", model=dict(GGUF), runtime={"llamacpp": {}})  # no sidecar
    serving.create("iris")  # KServe behind the sidecar
    chat = eventually(lambda: policy(serving, "chat"), timeout=30)
    assert chat["spec"]["policyTypes"] == ["Egress"]
    assert chat["spec"]["podSelector"]["matchLabels"]["longrun.dev/model-deployment"] == "chat"
    assert chat["spec"]["egress"] == [{"ports": DNS}, {"to": [V4, V6]}]
    iris = eventually(lambda: policy(serving, "iris"), timeout=30)
    assert iris["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert iris["spec"]["egress"] == chat["spec"]["egress"]
    (owner,) = chat["metadata"]["ownerReferences"]
    assert owner["kind"] == "ModelDeployment" and owner["name"] == "chat"


def test_the_egress_allow_list_is_all_server_pods_may_reach(
    env: Env, serving: Serving, monkeypatch: pytest.MonkeyPatch
) -> None:
    allow = {"enabled": True, "sameNamespace": True, "namespaces": ["storage"],
             "cidrs": [{"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}]}  # fmt: skip
    monkeypatch.setenv("DENIED_CIDRS", CHART_DENIED)
    monkeypatch.setenv("SERVING_EGRESS_POLICY", json.dumps(allow))
    env.start()
    serving.create("chat", model=dict(GGUF), runtime={"llamacpp": {}})
    found = eventually(lambda: policy(serving, "chat"), timeout=30)
    metadata_name = "kubernetes.io/metadata.name"
    assert found["spec"]["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {metadata_name: "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": DNS,
        },
        {"to": [{"podSelector": {}}]},
        {"to": [{"namespaceSelector": {"matchLabels": {metadata_name: "storage"}}}]},
        {
            "to": [
                {
                    "ipBlock": {
                        "cidr": "0.0.0.0/0",
                        "except": ["10.0.0.0/8", "100.100.100.200/32", "169.254.0.0/16"],
                    }
                }
            ]
        },
    ]


def test_a_host_and_a_service_type_off_the_allow_lists_are_reported_and_not_made(
    env: Env, serving: Serving
) -> None:
    env.start()
    serving.create("iris", endpoint={"ingress": {"host": "iris.example.com"}})
    status = serving.wait_phase("Failed")
    assert status["message"].startswith('spec.endpoint.ingress.host: host "iris.example.com" ')
    assert "serving.ingress.allowedHosts" in status["message"]
    serving.create("lb", endpoint={"serviceType": "LoadBalancer"})
    status = serving.wait_phase("Failed", name="lb")
    assert status["message"].startswith("spec.endpoint.serviceType: Service type LoadBalancer ")
    eventually(lambda: {"HostNotAllowed", "ServiceTypeNotAllowed"} <= reasons(env), timeout=15)
    assert serving.deployment("iris") is None and serving.deployment("lb") is None
    assert serving.net.list_namespaced_ingress(serving.ns).items == []
    assert client.CoreV1Api(env.kube.api_client()).list_namespaced_service(serving.ns).items == []


def reasons(env: Env) -> set[str]:
    """The reasons of the Warning events in the namespace."""
    return {e["reason"] for e in env.events() if e.get("type") == "Warning"}
