"""How a deployment is reached and scaled: Service, NetworkPolicy, HPA, Ingress, Certificate
and the endpoint URLs the status reports.

Real: the pure network builders on resolved plain-dict deployments. Faked: nothing.
"""

from __future__ import annotations

from controller.core.serving import names, network
from controller.core.serving.settings import ServingSettings
from tests.controller.unit.serving.objects import SETTINGS, deployment, for_runtime, resolved

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
    policy = network.build_network_policy(resolved(for_runtime("triton")))
    assert policy is not None
    assert policy["spec"]["podSelector"] == {"matchLabels": names.selector_labels("triton")}
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": 9080, "protocol": "TCP"}, {"port": 9081, "protocol": "TCP"}]}
    ]
    assert network.build_network_policy(resolved(deployment())) is None  # llama.cpp checks keys


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
