"""Metadata every child of a ModelDeployment carries: labels, owner reference, spec hash."""

from __future__ import annotations

import copy
from typing import Any

from controller.core.builders import ObjectIdentity, spec_hash
from controller.core.children import owner_reference
from controller.core.serving import names

Manifest = dict[str, Any]
KIND = "ModelDeployment"


def child_metadata(owner: ObjectIdentity, name: str, *, owned: bool = True) -> Manifest:
    """Metadata of a child; `owned=False` for a retained PVC, which must outlive its owner."""
    meta: Manifest = {
        "name": name,
        "namespace": owner.namespace,
        "labels": names.labels(owner.name),
        "annotations": {names.DEPLOYMENT_ANNOTATION: owner.name},
    }
    if owned:
        meta["ownerReferences"] = [owner_reference(owner, KIND)]
    return meta


def with_spec_hash(obj: Manifest, *, exclude: tuple[str, ...] = ()) -> Manifest:
    """`obj` with the digest of its spec (minus `exclude`) as an annotation, to see drift.

    The API server adds defaults to what we send, so the stored spec never equals ours;
    the annotation records what we last asked for.
    """
    spec = {k: v for k, v in obj["spec"].items() if k not in exclude}
    out = copy.deepcopy(obj)
    out["metadata"]["annotations"][names.SPEC_HASH_ANNOTATION] = spec_hash(spec)
    return out


def hash_of(obj: Manifest | None) -> str | None:
    """The spec-hash annotation of an object, if any."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(names.SPEC_HASH_ANNOTATION)
    return value if isinstance(value, str) else None
