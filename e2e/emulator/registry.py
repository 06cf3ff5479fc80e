"""The resource table: one row per served kind.

kube-apiserver has one REST storage per resource; the emulator has one generic
handler and this table describing what differs between kinds (scope, status
subresource, generation, default deletion propagation, short names). CRDs add
rows at runtime, so the table belongs to an emulator instance.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ResourceType:
    """What the generic handler needs to know about one group/version/resource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    has_status: bool = False
    has_generation: bool = False
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    singular: str = ""
    # kube-apiserver lets most built-ins be updated without a resourceVersion; CRs not.
    unconditional_update: bool = True
    # batch/v1 Jobs orphan their pods unless told otherwise (legacy default).
    default_propagation: str = "Background"
    # Extra field-selector labels the real server accepts for this kind.
    field_labels: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    crd_version: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # Discovery verbs when not the usual set (create-only reviews).
    verbs: tuple[str, ...] = ()
    storage_key: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """Storage key shared by all versions of a resource (etcd's /registry/<gr>)."""
        return self.storage_key or (f"{self.plural}.{self.group}" if self.group else self.plural)

    @property
    def is_custom(self) -> bool:
        return self.crd_version is not None


_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)

_RBAC = "rbac.authorization.k8s.io"
BUILTINS: tuple[ResourceType, ...] = (
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        namespaced=False,
        has_status=True,
        short_names=("ns",),
        field_labels=("status.phase",),
        subresources=("status",),
    ),
    ResourceType("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    ResourceType("", "v1", "secrets", "Secret", field_labels=("type",)),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        has_status=True,
        short_names=("po",),
        categories=("all",),
        field_labels=_POD_FIELDS,
        subresources=("status", "log", "binding"),
    ),
    # Registered by a node agent (e2e/nodeagent) when the built-in kubelet is off.
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        namespaced=False,
        has_status=True,
        short_names=("no",),
        subresources=("status",),
    ),
    ResourceType("", "v1", "events", "Event", short_names=("ev",), field_labels=_EVENT_FIELDS),
    ResourceType(
        "", "v1", "serviceaccounts", "ServiceAccount", short_names=("sa",), subresources=("token",)
    ),
    ResourceType(
        "batch",
        "v1",
        "jobs",
        "Job",
        has_status=True,
        has_generation=True,
        categories=("all",),
        default_propagation="Orphan",
        field_labels=("status.successful",),
        subresources=("status",),
    ),
    ResourceType(
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        has_status=True,
        has_generation=True,
        short_names=("cj",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    # What a ModelDeployment owns (issue 21), stored as they are: no Deployment or HPA
    # controller runs here; tests write a Deployment's status themselves.
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        has_status=True,
        has_generation=True,
        short_names=("deploy",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType(
        "",
        "v1",
        "services",
        "Service",
        has_status=True,
        short_names=("svc",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        has_status=True,
        short_names=("pvc",),
        subresources=("status",),
    ),
    # An InferenceModel's Service endpoints (controller/core/fleets/builders.py), stored as sent.
    ResourceType(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
    ),
    ResourceType(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        has_generation=True,
        short_names=("netpol",),
    ),
    ResourceType(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        has_status=True,
        has_generation=True,
        short_names=("ing",),
        subresources=("status",),
    ),
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        has_status=True,
        short_names=("hpa",),
        categories=("all",),
        subresources=("status",),
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        short_names=("ev",),
        field_labels=_EVENT_FIELDS,
        storage_key="events",  # one storage with core/v1 Events, as on a real server
    ),
    # RBAC (rbac.py decides with them) and the access reviews `kubectl auth can-i` sends.
    ResourceType(_RBAC, "v1", "roles", "Role"),
    ResourceType(_RBAC, "v1", "rolebindings", "RoleBinding"),
    ResourceType(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    ResourceType(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        namespaced=False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        namespaced=False,
        verbs=("create",),
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        namespaced=False,
        verbs=("create",),
    ),
    ResourceType(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        namespaced=False,
        verbs=("create",),
    ),
    ResourceType(
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
        namespaced=False,
        verbs=("create",),
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        namespaced=False,
        has_status=True,
        has_generation=True,
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        subresources=("status",),
    ),
)


class Registry:
    """Thread-safe lookup of served resources, by URL parts or by storage key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        for rt in BUILTINS:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def add(self, rt: ResourceType) -> None:
        with self._lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt

    def remove_group_resource(self, group: str, plural: str) -> None:
        with self._lock:
            for k in [k for k in self._types if k[0] == group and k[2] == plural]:
                del self._types[k]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._lock:
            return self._types.get((group, version, plural))

    def by_key(self, key: str) -> ResourceType | None:
        """Any served version of the resource stored under `key`."""
        with self._lock:
            for rt in self._types.values():
                if rt.key == key:
                    return rt
        return None

    def all(self) -> list[ResourceType]:
        with self._lock:
            return list(self._types.values())

    def groups(self) -> dict[str, list[str]]:
        """Group name -> served versions, preferred first."""
        out: dict[str, list[str]] = {}
        for rt in self.all():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        for versions in out.values():
            versions.sort(key=_version_priority)
        return out


def _version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version ordering: GA > beta > alpha, then higher numbers first."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor)
