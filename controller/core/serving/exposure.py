"""Who may claim an Ingress host, a certificate and a Service type: allow-lists, since the
controller creates these objects with its own rights, not the deployment author's.

On an ingress controller that merges Ingresses, a host and path claimed by one namespace
take another's traffic, Bearer keys included; an ACME ClusterIssuer signs for any host it
is asked about; a LoadBalancer or NodePort Service opens the server outside the cluster.
So (settings.py has the defaults):
- `endpoint.ingress.host` must match a pattern of ALLOWED_SERVING_HOSTS, where a label `*`
  is any one label and `{namespace}` is the deployment's namespace (none by default: no
  Ingress until the cluster admin says which hosts belong to whom);
- `endpoint.tls.issuerRef` of kind ClusterIssuer must match ALLOWED_SERVING_CLUSTER_ISSUERS
  (none by default); an Issuer is always the deployment's own namespace's (cert-manager looks
  it up there), so it is allowed;
- `endpoint.serviceType` must be on ALLOWED_SERVING_SERVICE_TYPES (ClusterIP always is).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

from contracts.serving import ModelDeploymentSpec
from controller.core.serving.settings import NAMESPACE_PLACEHOLDER, ServingSettings
from controller.core.validation import Problem


def exposure_problems(
    spec: ModelDeploymentSpec, settings: ServingSettings, *, namespace: str
) -> Iterator[Problem]:
    """Service type, Ingress host and ClusterIssuer off their allow-lists, in field order."""
    endpoint = spec.endpoint
    if endpoint.service_type not in settings.allowed_service_types:
        listed = ", ".join(settings.allowed_service_types)
        yield Problem(
            "spec.endpoint.serviceType",
            "ServiceTypeNotAllowed",
            f"Service type {endpoint.service_type} is not allowed: the controller allows "
            f"ALLOWED_SERVING_SERVICE_TYPES (chart: serving.allowedServiceTypes), which is "
            f"{listed}; a NodePort or LoadBalancer Service opens the server outside the cluster",
        )
    if endpoint.ingress is not None:
        yield from _host_problems(endpoint.ingress.host, settings.allowed_hosts, namespace)
    if endpoint.tls is not None and endpoint.tls.issuer_ref.kind == "ClusterIssuer":
        name = endpoint.tls.issuer_ref.name
        allowed = settings.allowed_cluster_issuers
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed):
            yield Problem(
                "spec.endpoint.tls.issuerRef",
                "IssuerNotAllowed",
                f'ClusterIssuer "{name}" is not allowed: the controller allows ClusterIssuers '
                "matching ALLOWED_SERVING_CLUSTER_ISSUERS (chart: "
                f"serving.tls.allowedClusterIssuers), which is {', '.join(allowed) or 'empty'}; "
                "an Issuer of the deployment's own namespace (kind: Issuer) is always allowed",
            )


def is_allowed_host(host: str, patterns: tuple[str, ...], *, namespace: str) -> bool:
    """True when `host` matches a pattern: label by label, `*` any one label, `{namespace}`
    the namespace; the lone pattern `*` matches every host."""
    labels = host.lower().split(".")
    for pattern in patterns:
        if pattern == "*":
            return True
        wanted = pattern.replace(NAMESPACE_PLACEHOLDER, namespace).split(".")
        if len(wanted) == len(labels) and all(
            w == "*" or w == label for w, label in zip(wanted, labels, strict=True)
        ):
            return True
    return False


def _host_problems(host: str, patterns: tuple[str, ...], namespace: str) -> Iterator[Problem]:
    if is_allowed_host(host, patterns, namespace=namespace):
        return
    listed = ", ".join(patterns) if patterns else "empty (no Ingress host is allowed)"
    yield Problem(
        "spec.endpoint.ingress.host",
        "HostNotAllowed",
        f'host "{host}" is not allowed in namespace "{namespace}": the controller allows hosts '
        "matching ALLOWED_SERVING_HOSTS (chart: serving.ingress.allowedHosts, where "
        f"{NAMESPACE_PLACEHOLDER} is the deployment's namespace), which is {listed}",
    )
