"""What the serving adapter (controller/kube/serving.py) reads from, and drops of, an object.

Constants and pure functions on plain JSON dicts, no client and no state: which kinds
the adapter watches (`OWN_KINDS`, `CHILD_KINDS`) and the name of each child
(`CHILD_NAMES`); `trim` shrinks what the informers cache, `without_data` strips a Secret
the API server returned, and `deployment_of` and `run_facing` pick out the
keys and the status the adapter's indexes are built on. They live apart from
`KubeServing` so that the adapter holds only its caches, indexes and REST calls, and so
that these rules can be read and tested without an informer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.core.ports import Obj
from controller.core.serving import names

# The kinds the adapter watches: its own, and the children labelled with their deployment.
OWN_KINDS = ("ModelDeployment", "Model")
CHILD_KINDS = (
    "Deployment",
    "Service",
    "ConfigMap",
    "PersistentVolumeClaim",
    "NetworkPolicy",
    "Ingress",
    "HorizontalPodAutoscaler",
    "Pod",
)
# Each child by its deterministic name (names.py); pods are found through the index.
CHILD_NAMES: dict[str, Callable[[str], str]] = {
    "Deployment": names.deployment_name,
    "Service": names.service_name,
    "ConfigMap": names.auth_config_name,
    "PersistentVolumeClaim": names.cache_claim_name,
    "NetworkPolicy": names.network_policy_name,
    "HorizontalPodAutoscaler": names.hpa_name,
    "Certificate": names.certificate_name,
    "Ingress": names.ingress_name,
}
# What a run reads from a deployment's status: a change wakes the runs that use it.
RUN_FACING = ("phase", "endpoint", "protocol", "modelName", "apiKeySecret")


def trim(kind: str, obj: Obj) -> Obj:
    """Drop in place what the serving reconciler never reads (pods keep their status:
    conditions and init container states name the failure causes)."""
    meta = obj.get("metadata") or {}
    meta.pop("managedFields", None)
    if kind == "Pod":
        obj.pop("spec", None)
        status = obj.get("status") or {}
        for key in ("podIPs", "podIP", "hostIP", "hostIPs"):
            status.pop(key, None)
    elif kind == "Deployment":
        (obj.get("spec") or {}).pop("template", None)  # drift shows in the spec-hash annotation
    return obj


def without_data(obj: Obj) -> Obj:
    """A Secret the API server returned, with nothing of its content."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": dict(obj.get("metadata") or {})}


def deployment_of(obj: Obj) -> str | None:
    """The `namespace/name` of the ModelDeployment a child or pod was made for."""
    meta = obj.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(names.DEPLOYMENT_ANNOTATION)
    return f"{meta.get('namespace', '')}/{name}" if name else None


def run_facing(deployment: Obj | None) -> tuple[Any, ...]:
    """What runs depend on: the deployment's status (endpoint, Available, ...) and which
    namespaces it allows (a run of a namespace taken off the list is refused at once)."""
    status = (deployment or {}).get("status") or {}
    available = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Available"),
        None,
    )
    allowed = ((deployment or {}).get("spec") or {}).get("allowedNamespaces") or []
    return (*(status.get(k) for k in RUN_FACING), available, tuple(allowed))
