"""CustomResourceDefinitions: validation, server-set status, and serving rows.

Creating a CRD makes its resources appear in discovery and on the REST paths at
once (the real server takes a moment; clients poll `Established`, which the
emulator sets immediately). Each served version becomes a ResourceType sharing
one storage key, as all versions of a CR share one etcd prefix.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, invalid, required
from .registry import ResourceType

Obj = dict[str, Any]
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def default_crd(crd: Obj) -> None:
    spec = crd.setdefault("spec", {})
    spec.setdefault("conversion", {"strategy": "None"})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("listKind", names["kind"] + "List")
        names.setdefault("singular", names["kind"].lower())
    meta = crd["metadata"]
    fins = meta.setdefault("finalizers", [])
    if CLEANUP_FINALIZER not in fins:
        fins.append(CLEANUP_FINALIZER)
    set_status(crd)


def set_status(crd: Obj) -> None:
    spec = crd["spec"]
    storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    crd["status"] = {
        "acceptedNames": dict(spec.get("names") or {}),
        "conditions": [
            _cond("NamesAccepted", "NoConflicts", "no conflicts found", crd),
            _cond(
                "Established",
                "InitialNamesAccepted",
                "the initial names have been accepted",
                crd,
            ),
        ],
        "storedVersions": storage,
    }


def _cond(type_: str, reason: str, message: str, crd: Obj) -> Obj:
    return {
        "type": type_,
        "status": "True",
        "lastTransitionTime": crd["metadata"]["creationTimestamp"],
        "reason": reason,
        "message": message,
    }


def validate_crd(crd: Obj) -> list[FieldError]:
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    errors: list[FieldError] = []
    for field in ("group",):
        if not spec.get(field):
            errors.append(required(f"spec.{field}"))
    for field in ("plural", "kind"):
        if not names.get(field):
            errors.append(required(f"spec.names.{field}"))
    expected = f"{names.get('plural')}.{spec.get('group')}"
    if crd["metadata"].get("name") != expected:
        errors.append(
            invalid(
                "metadata.name",
                crd["metadata"].get("name"),
                'must be spec.names.plural+"."+spec.group',
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errors.append(
            invalid("spec.scope", spec.get("scope"), "must be one of Namespaced, Cluster")
        )
    versions = spec.get("versions") or []
    if not versions:
        errors.append(
            required(
                "spec.versions",
                "must have exactly one version marked as storage version",
            )
        )
    if sum(1 for v in versions if v.get("storage")) != 1 and versions:
        errors.append(
            invalid(
                "spec.versions", versions, "must have exactly one version marked as storage version"
            )
        )
    for i, v in enumerate(versions):
        if not (v.get("schema") or {}).get("openAPIV3Schema"):
            errors.append(
                required(f"spec.versions[{i}].schema.openAPIV3Schema", "schemas are required")
            )
    return errors


def resource_types(crd: Obj) -> list[ResourceType]:
    """One ResourceType per served version."""
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        has_status = "status" in (version.get("subresources") or {})
        selectable = tuple(f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or [])
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope") == "Namespaced",
                has_status=has_status,
                has_generation=True,
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                singular=names.get("singular", names["kind"].lower()),
                unconditional_update=False,
                field_labels=selectable,
                subresources=("status",) if has_status else (),
                crd_version=version,
                storage_key=f"{names['plural']}.{spec['group']}",
            )
        )
    return out
