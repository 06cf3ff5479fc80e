"""How a deployment is reached and scaled: Service, NetworkPolicy, HPA, Ingress, Certificate
and the endpoint URLs the status reports.

Real: the pure network builders on resolved plain-dict deployments, and the decision that
creates them under the settings the chart's environment sets. Faked: nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.core.serving import names, network
from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from tests.controller.unit.serving.objects import (
    RUNTIMES,
    SETTINGS,
    created,
    decide,
    deployment,
    for_runtime,
    resolved,
)

TLS = {
    "ingress": {"host": "llm.example.com", "path": "/chat", "className": "nginx"},
    "tls": {"issuerRef": {"name": "letsencrypt", "kind": "ClusterIssuer"}},
}


def test_service_targets_the_named_http_port_of_the_pods() -> None:
    svc = network.build_service(
        resolved(deployment(endpoint={"serviceType": "LoadBalancer", "port": 80}))
    )
    assert svc["spec"] == {
        "type": "LoadBalancer",
        "selector": names.selector_labels("chat"),
        "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
    }
    assert names.SPEC_HASH_ANNOTATION in svc["metadata"]["annotations"]


def test_service_exposes_grpc_for_grpc_runs() -> None:
    svc = network.build_service(resolved(for_runtime("triton", endpoint={"grpcPort": 8001})))
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    assert ports == {"http": (8080, "http"), "grpc": (8001, "grpc")}


def test_network_policy_opens_only_the_sidecar_ports() -> None:
    policy = network.build_network_policy(resolved(for_runtime("triton")), SETTINGS)
    assert policy is not None
    assert policy["spec"]["podSelector"] == {"matchLabels": names.selector_labels("triton")}
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # no denied network: no egress rule
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": 9080, "protocol": "TCP"}, {"port": 9081, "protocol": "TCP"}]}
    ]
    # llama.cpp checks the keys itself, and nothing is denied: no policy at all.
    assert network.build_network_policy(resolved(deployment()), SETTINGS) is None


def test_hpa_scales_on_cpu_by_default() -> None:
    hpa = network.build_hpa(resolved(deployment(autoscaling={"minReplicas": 2, "maxReplicas": 5})))
    assert hpa is not None and hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"},
        "minReplicas": 2,
        "maxReplicas": 5,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80},
                },
            }
        ],
    }


def test_hpa_scales_on_a_pods_metric() -> None:
    metric = {"name": "llamacpp:requests_processing", "targetAverageValue": 2}
    hpa = network.build_hpa(
        resolved(deployment(autoscaling={"maxReplicas": 3, "podsMetric": metric}))
    )
    assert hpa is not None
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "llamacpp:requests_processing"},
                "target": {"type": "AverageValue", "averageValue": 2},
            },
        }
    ]
    assert network.build_hpa(resolved(deployment())) is None


def test_ingress_routes_the_host_to_the_service_with_the_certificate_secret() -> None:
    r = resolved(deployment(endpoint=TLS))
    ingress = network.build_ingress(r)
    assert ingress is not None
    assert ingress["spec"] == {
        "ingressClassName": "nginx",
        "rules": [
            {
                "host": "llm.example.com",
                "http": {
                    "paths": [
                        {
                            "path": "/chat",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "chat", "port": {"name": "http"}}},
                        }
                    ]
                },
            }
        ],
        "tls": [{"hosts": ["llm.example.com"], "secretName": "chat-tls"}],
    }


def test_certificate_is_requested_from_the_named_issuer() -> None:
    cert = network.build_certificate(resolved(deployment(endpoint=TLS)))
    assert cert is not None and cert["apiVersion"] == "cert-manager.io/v1"
    assert cert["spec"] == {
        "secretName": "chat-tls",
        "dnsNames": ["llm.example.com"],
        "issuerRef": {"name": "letsencrypt", "kind": "ClusterIssuer", "group": "cert-manager.io"},
    }


def test_no_ingress_means_no_ingress_and_no_certificate() -> None:
    r = resolved(deployment())
    assert network.build_ingress(r) is None and network.build_certificate(r) is None
    assert network.external_url(r) is None


def test_endpoints_are_in_cluster_urls_and_the_ingress_url() -> None:
    r = resolved(deployment(endpoint=TLS))
    assert network.endpoint_url(r, SETTINGS) == "http://chat.team.svc.cluster.local:8080"
    assert network.external_url(r) == "https://llm.example.com/chat"
    grpc = resolved(for_runtime("triton"))
    domain = ServingSettings(cluster_domain="k8s.internal")
    assert network.endpoint_url(grpc, domain) == "triton.team.svc.k8s.internal:8081"


# -- egress: the runners' network guard, enforced by the kernel for model servers -----------

CHART_DENIED = "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32"
DNS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
EVERYTHING_BUT_DENIED = [
    {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["100.100.100.200/32", "169.254.0.0/16"]}},
    {
        "ipBlock": {
            "cidr": "::/0",
            "except": [
                "64:ff9b::6464:64c8/128",  # NAT64 and 6to4 forms of the IPv4 networks
                "64:ff9b::a9fe:0/112",
                "2002:6464:64c8::/48",
                "2002:a9fe::/32",
                "fd00:ec2::254/128",
                "fe80::/10",
            ],
        }
    },
]


def policy_of(obj: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    """The NetworkPolicy a first decision creates under the settings `env` sets."""
    generic = {
        "ALLOWED_SERVING_IMAGES": "vllm/vllm-openai:*",
        "SERVING_ALLOW_CUSTOM_COMMANDS": "true",
    }
    settings = serving_settings_from_env({**env, **generic})  # the generic sample is allowed
    return created(decide(obj, settings=settings)).get("NetworkPolicy")


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_server_pods_may_reach_every_address_but_the_denied_networks(runtime: str) -> None:
    policy = policy_of(for_runtime(runtime), {"DENIED_CIDRS": CHART_DENIED})
    assert policy is not None, "a model server checks no address itself: the policy must"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": names.selector_labels(runtime)}
    sidecar = runtime != "llamacpp"  # llama.cpp checks keys itself: no ingress rule
    assert spec["policyTypes"] == (["Ingress", "Egress"] if sidecar else ["Egress"])
    assert ("ingress" in spec) == sidecar
    assert spec["egress"] == [{"ports": DNS}, {"to": EVERYTHING_BUT_DENIED}]


def test_no_denied_network_and_no_sidecar_means_no_policy() -> None:
    assert policy_of(deployment(), {}) is None
    assert policy_of(deployment(), {"DENIED_CIDRS": ""}) is None


def test_denying_every_address_leaves_only_dns() -> None:
    # An empty `to` would allow every address: the rule is left out instead.
    policy = policy_of(deployment(), {"DENIED_CIDRS": "0.0.0.0/0,::/0"})
    assert policy is not None and policy["spec"]["egress"] == [{"ports": DNS}]


def test_the_egress_allow_list_replaces_every_address_and_keeps_denied_networks_closed() -> None:
    allow = {
        "enabled": True,
        "dns": {"enabled": True, "namespace": "kube-system", "podLabels": {"k8s-app": "kube-dns"}},
        "sameNamespace": False,
        "namespaces": ["storage"],
        "cidrs": ["0.0.0.0/0", {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]},
                  "169.254.20.10/32"],  # NodeLocal DNSCache: listed inside a denied network
    }  # fmt: skip
    env = {"DENIED_CIDRS": CHART_DENIED, "SERVING_EGRESS_POLICY": json.dumps(allow)}
    policy = policy_of(deployment(), env)
    assert policy is not None
    namespace = "kubernetes.io/metadata.name"
    assert policy["spec"]["egress"] == [
        {
            "to": [
                {
                    "namespaceSelector": {"matchLabels": {namespace: "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }
            ],
            "ports": DNS,
        },
        {"to": [{"namespaceSelector": {"matchLabels": {namespace: "storage"}}}]},
        {
            "to": [
                EVERYTHING_BUT_DENIED[0],
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
                {"ipBlock": {"cidr": "169.254.20.10/32"}},
            ]
        },
    ]


def test_a_changed_deny_list_reaches_the_policy() -> None:
    obj = for_runtime("kserve")
    before = policy_of(obj, {"DENIED_CIDRS": CHART_DENIED})
    after = policy_of(obj, {"DENIED_CIDRS": "169.254.0.0/16,10.0.0.0/8"})
    assert before is not None and after is not None
    assert before["metadata"]["annotations"] != after["metadata"]["annotations"]  # spec hash
