"""Pure builders of what an InferenceModel owns: a selector-less Service, its EndpointSlices.

A Service without a selector gets no endpoints from Kubernetes; its EndpointSlices are
ours (label `endpointslice.kubernetes.io/managed-by: fleets.longrun.dev`, so the
EndpointSlice controller leaves them alone), one per address family and host port, each
linked to the Service by `kubernetes.io/service-name`. Every endpoint is a host's address,
which addresses.py has cleared (never loopback or link-local, which kube-apiserver refuses
in a slice anyway), ready when the replica on it is, and points at its InferenceHost.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from contracts.resources import API_VERSION
from controller.core.builders import spec_hash
from controller.core.children import ObjectIdentity, owner_reference
from controller.core.fleets import names
from controller.core.fleets.addresses import family
from controller.core.names import SPEC_HASH_ANNOTATION

Manifest = dict[str, Any]
KIND = "InferenceModel"


@dataclass(frozen=True)
class Endpoint:
    """A replica as an EndpointSlice entry."""

    host: str
    address: str
    port: int
    ready: bool


def _metadata(owner: ObjectIdentity, name: str) -> Manifest:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": names.labels(owner.name),
        "ownerReferences": [owner_reference(owner, KIND)],
    }


def _hashed(obj: Manifest, fields: Manifest) -> Manifest:
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = spec_hash(fields)
    return out


def build_service(owner: ObjectIdentity, port: int) -> Manifest:
    """The Service: `port`, no selector (its endpoints are the slices below)."""
    spec = {
        "type": "ClusterIP",
        "ports": [{"name": names.PORT_NAME, "port": port, "protocol": "TCP", "targetPort": port}],
    }
    metadata = _metadata(owner, names.service_name(owner.name))
    return _hashed(
        {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}, spec
    )


def build_slices(owner: ObjectIdentity, endpoints: Sequence[Endpoint]) -> list[Manifest]:
    """One EndpointSlice per address family and host port, endpoints sorted by host."""
    groups: dict[tuple[str, int], list[Endpoint]] = {}
    for endpoint in sorted(endpoints, key=lambda e: e.host):
        groups.setdefault((family(endpoint.address), endpoint.port), []).append(endpoint)
    return [_slice(owner, fam, port, items) for (fam, port), items in sorted(groups.items())]


def _slice(owner: ObjectIdentity, fam: str, port: int, items: list[Endpoint]) -> Manifest:
    metadata = _metadata(owner, names.slice_name(owner.name, fam, port))
    metadata["labels"] |= {
        names.SERVICE_NAME_LABEL: names.service_name(owner.name),
        names.SLICE_MANAGED_BY: names.SLICE_MANAGER,
    }
    fields: Manifest = {
        "addressType": fam,
        "ports": [{"name": names.PORT_NAME, "port": port, "protocol": "TCP"}],
        "endpoints": [_endpoint(owner, e) for e in items],
    }
    body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": metadata}
    return _hashed({**body, **fields}, fields)


def _endpoint(owner: ObjectIdentity, e: Endpoint) -> Manifest:
    return {
        "addresses": [e.address],
        "conditions": {"ready": e.ready, "serving": e.ready, "terminating": False},
        "targetRef": {
            "apiVersion": API_VERSION,
            "kind": "InferenceHost",
            "namespace": owner.namespace,
            "name": e.host,
        },
    }


def service_endpoint(
    owner: ObjectIdentity, port: int, cluster_domain: str, *, scheme: str = "http"
) -> str:
    """The Service's in-cluster URL (what runs call)."""
    host = f"{names.service_name(owner.name)}.{owner.namespace}.svc.{cluster_domain}"
    return f"{scheme}://{host}:{port}"


def hash_of(obj: Manifest | None) -> str | None:
    """The spec-hash annotation of an object, if any."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(SPEC_HASH_ANNOTATION)
    return value if isinstance(value, str) else None
