"""Pure builders for how a deployment is reached and scaled: Service, NetworkPolicy,
HorizontalPodAutoscaler, Ingress and cert-manager Certificate; and its endpoint URLs.

The Service targets the container ports named `http`/`grpc`, which are the auth
sidecar's when it checks the keys, so every path in goes through the key check. The
NetworkPolicy closes the pod's other ports: KServe's server and generic images listen
on every address, and without it the runtime's own port would be reachable unchecked.
It also carries the pods' egress guard (egress.py): a model server is third-party code,
so the networks runners refuse (DENIED_CIDRS) are closed to it by the kernel.
"""

from __future__ import annotations

from typing import Any

from controller.core.serving import auth, names
from controller.core.serving.egress import egress_rules
from controller.core.serving.meta import child_metadata, with_spec_hash
from controller.core.serving.resolve import ServingResolved
from controller.core.serving.settings import ServingSettings

Manifest = dict[str, Any]
DEFAULT_CPU_PERCENT = 80


def build_service(r: ServingResolved) -> Manifest:
    """The Service: port `endpoint.port` (HTTP) and, for gRPC runs, `endpoint.grpcPort`."""
    endpoint = r.spec.endpoint
    ports: list[Manifest] = []
    if r.plan.http_port is not None:
        ports.append({"name": "http", "port": endpoint.port, "targetPort": "http"})
    if r.plan.grpc_port is not None:
        ports.append({"name": "grpc", "port": endpoint.grpc_port, "targetPort": "grpc"})
    spec = {
        "type": endpoint.service_type,
        "selector": names.selector_labels(r.owner.name),
        "ports": [{**p, "protocol": "TCP"} for p in ports],
    }
    metadata = child_metadata(r.owner, names.service_name(r.owner.name))
    return with_spec_hash(
        {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}
    )


def build_network_policy(r: ServingResolved, settings: ServingSettings) -> Manifest | None:
    """The server pods' NetworkPolicy: with the sidecar, only its ports are open to other
    pods; with denied networks or the egress allow-list, the egress rules of egress.py
    (every container of the pod, the model download included). None when neither applies."""
    spec: Manifest = {
        "podSelector": {"matchLabels": names.selector_labels(r.owner.name)},
        "policyTypes": [],
    }
    if r.uses_auth_proxy:
        ports = [{"port": p["containerPort"], "protocol": "TCP"} for p in auth.proxy_ports(r.plan)]
        spec["policyTypes"].append("Ingress")
        spec["ingress"] = [{"ports": ports}]
    if (rules := egress_rules(settings.denied_cidrs, settings.egress)) is not None:
        spec["policyTypes"].append("Egress")
        spec["egress"] = rules
    if not spec["policyTypes"]:
        return None
    metadata = child_metadata(r.owner, names.network_policy_name(r.owner.name))
    body = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata}
    return with_spec_hash({**body, "spec": spec})


def build_hpa(r: ServingResolved) -> Manifest | None:
    """The autoscaling/v2 HorizontalPodAutoscaler, or None without `autoscaling`."""
    scaling = r.spec.autoscaling
    if scaling is None:
        return None
    if scaling.pods_metric is not None:
        metric: Manifest = {
            "type": "Pods",
            "pods": {
                "metric": {"name": scaling.pods_metric.name},
                "target": {
                    "type": "AverageValue",
                    "averageValue": scaling.pods_metric.target_average_value,
                },
            },
        }
    else:
        target = {"type": "Utilization", "averageUtilization": scaling.target_cpu_percent}
        if target["averageUtilization"] is None:
            target["averageUtilization"] = DEFAULT_CPU_PERCENT
        metric = {"type": "Resource", "resource": {"name": "cpu", "target": target}}
    spec = {
        "scaleTargetRef": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": names.deployment_name(r.owner.name),
        },
        "minReplicas": scaling.min_replicas,
        "maxReplicas": scaling.max_replicas,
        "metrics": [metric],
    }
    metadata = child_metadata(r.owner, names.hpa_name(r.owner.name))
    body = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"}
    return with_spec_hash({**body, "metadata": metadata, "spec": spec})


def tls_secret(r: ServingResolved) -> str | None:
    """The Secret holding the Ingress certificate, when TLS is on."""
    tls = r.spec.endpoint.tls
    if tls is None:
        return None
    return tls.secret_name or names.tls_secret_name(r.owner.name)


def build_ingress(r: ServingResolved) -> Manifest | None:
    """The Ingress to the Service's http port, or None without `endpoint.ingress`."""
    ingress = r.spec.endpoint.ingress
    if ingress is None:
        return None
    backend = {"service": {"name": names.service_name(r.owner.name), "port": {"name": "http"}}}
    path = {"path": ingress.path, "pathType": "Prefix", "backend": backend}
    spec: Manifest = {"rules": [{"host": ingress.host, "http": {"paths": [path]}}]}
    if ingress.class_name is not None:
        spec["ingressClassName"] = ingress.class_name
    if (secret := tls_secret(r)) is not None:
        spec["tls"] = [{"hosts": [ingress.host], "secretName": secret}]
    metadata = child_metadata(r.owner, names.ingress_name(r.owner.name))
    body = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": metadata}
    return with_spec_hash({**body, "spec": spec})


def build_certificate(r: ServingResolved) -> Manifest | None:
    """The cert-manager Certificate for the Ingress host, or None without `endpoint.tls`."""
    tls, ingress, secret = r.spec.endpoint.tls, r.spec.endpoint.ingress, tls_secret(r)
    if tls is None or ingress is None or secret is None:
        return None
    issuer = {"name": tls.issuer_ref.name, "kind": tls.issuer_ref.kind, "group": "cert-manager.io"}
    spec = {"secretName": secret, "dnsNames": [ingress.host], "issuerRef": issuer}
    metadata = child_metadata(r.owner, names.certificate_name(r.owner.name))
    body = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": metadata}
    return with_spec_hash({**body, "spec": spec})


def endpoint_url(r: ServingResolved, settings: ServingSettings) -> str:
    """The in-cluster URL runs use: http://svc.ns.svc.<domain>:port, or host:port for gRPC."""
    host = f"{names.service_name(r.owner.name)}.{r.owner.namespace}.svc.{settings.cluster_domain}"
    if r.plan.is_grpc:
        return f"{host}:{r.spec.endpoint.grpc_port}"
    return f"http://{host}:{r.spec.endpoint.port}"


def external_url(r: ServingResolved) -> str | None:
    """The URL through the Ingress, when there is one."""
    ingress = r.spec.endpoint.ingress
    if ingress is None:
        return None
    scheme = "https" if r.spec.endpoint.tls is not None else "http"
    return f"{scheme}://{ingress.host}{ingress.path}"
