"""Discovery documents, version, OpenAPI stubs and Table output.

kubectl and the Python client find resources through legacy discovery
(`/api`, `/apis`, `/apis/<group>/<version>`); aggregated discovery is not
offered, and kubectl falls back on its own, as it does against older servers.
Table output lets `kubectl get` print a CRD's additionalPrinterColumns.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from . import printers
from .registry import Registry, ResourceType

Obj = dict[str, Any]
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-longrun-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_versions(host: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
    }


def _group_doc(name: str, versions: list[str]) -> Obj:
    gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}


def api_group_list(registry: Registry) -> Obj:
    groups = [_group_doc(g, vs) for g, vs in sorted(registry.groups().items()) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> Obj | None:
    versions = registry.groups().get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def resource_list(registry: Registry, group: str, version: str) -> Obj | None:
    types = [rt for rt in registry.all() if rt.group == group and rt.version == version]
    if not types:
        return None
    resources: list[Obj] = []
    for rt in sorted(types, key=lambda r: r.plural):
        verbs = list(rt.verbs) or [
            v for v in VERBS if not (rt.plural == "namespaces" and v == "deletecollection")
        ]
        entry: Obj = {
            "name": rt.plural,
            "singularName": rt.singular or rt.kind.lower(),
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": verbs,
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        if rt.categories:
            entry["categories"] = list(rt.categories)
        resources.append(entry)
        for sub in rt.subresources:
            sub_verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
            if sub == "finalize":
                sub_verbs = ["update"]
            if sub in ("binding", "token"):
                sub_verbs = ["create"]
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": sub_verbs,
                }
            )
    gv = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }


# -- Table output -----------------------------------------------------------------------
def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def _jsonpath(obj: Any, path: str) -> Any:
    cur = obj
    for part in re.findall(r"[^.\[\]]+", path):
        if isinstance(cur, list):
            cur = cur[int(part)] if part.isdigit() and int(part) < len(cur) else None
        elif isinstance(cur, dict):
            cur = cur.get(part)
        else:
            return None
    return cur


_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "priority": 0,
    "description": "Name must be unique within a namespace.",
}
_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _columns(rt: ResourceType) -> list[Obj]:
    """Name, then the CRD's printer columns, or the built-in kind's, then Age."""
    if rt.is_custom:
        cols = (rt.crd_version or {}).get("additionalPrinterColumns")
        custom = [_AGE] if cols is None else cols
    else:
        builtin = printers.COLUMNS.get((rt.group, rt.plural), [])
        custom = [{"name": name, "type": "string", "cell": fn} for name, fn in builtin] + [_AGE]
    return [_NAME_COLUMN] + [
        {
            "name": c["name"],
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "priority": c.get("priority", 0),
            "description": c.get("description", ""),
            **({"cell": c["cell"]} if "cell" in c else {"jsonPath": c["jsonPath"]}),
        }
        for c in custom
    ]


def _cell(col: Obj, obj: Obj, now: datetime) -> Any:
    if "cell" in col:
        return col["cell"](obj, now)
    value = _jsonpath(obj, col["jsonPath"])
    if col["type"] == "date" and isinstance(value, str):
        return printers.age(value, now)
    return value


def table(rt: ResourceType, objs: list[Obj], *, rv: str, now: datetime, include: str) -> Obj:
    """A meta.k8s.io/v1 Table, what `kubectl get` asks for."""
    cols = _columns(rt)
    rows = []
    for obj in objs:
        row: Obj = {"cells": [obj["metadata"]["name"]] + [_cell(c, obj, now) for c in cols[1:]]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    definitions = [{k: v for k, v in c.items() if k not in ("jsonPath", "cell")} for c in cols]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": definitions,
        "rows": rows,
    }


# -- OpenAPI --------------------------------------------------------------------------------
# kubectl (>= 1.27) reads /openapi/v3 to learn whether PATCH accepts `fieldValidation`;
# when it does, kubectl relies on server-side validation and needs no client-side schemas.
def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_root(registry: Registry) -> Obj:
    paths = {}
    for group, versions in registry.groups().items():
        for version in versions:
            path = _gv_path(group, version)
            paths[path] = {
                "serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(registry, group, version)}"
            }
    return {"paths": paths}


def _hash(registry: Registry, group: str, version: str) -> str:
    import hashlib

    names = sorted(
        rt.plural for rt in registry.all() if rt.group == group and rt.version == version
    )
    crd_bits = [
        str(rt.crd_version) for rt in registry.all() if rt.group == group and rt.version == version
    ]
    return hashlib.sha256(("|".join(names) + "|".join(crd_bits)).encode()).hexdigest()[:32].upper()


def openapi_v3_group_version(registry: Registry, group: str, version: str) -> Obj | None:
    types = [rt for rt in registry.all() if rt.group == group and rt.version == version]
    if not types:
        return None
    params = [
        {"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
        for n in ("dryRun", "fieldManager", "fieldValidation", "force")
    ]
    paths: Obj = {}
    schemas: Obj = {}
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        prefix = "/" + _gv_path(group, version)
        item = (
            f"{prefix}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
            if rt.namespaced
            else f"{prefix}/{rt.plural}/{{name}}"
        )
        op = {
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
        }
        paths[item] = {"patch": op}
        schema = ((rt.crd_version or {}).get("schema") or {}).get("openAPIV3Schema")
        if schema is not None:
            name = ".".join(reversed(rt.group.split("."))) + f".{rt.version}.{rt.kind}"
            schemas[name] = {**schema, "x-kubernetes-group-version-kind": [gvk]}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _pb_field(num: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (enough to hand-encode a tiny document)."""
    return bytes([num << 3 | 2, len(payload)]) + payload


# An OpenAPI v2 document without paths, protobuf-encoded (gnostic openapi_v2.Document:
# swagger=1, info=2 {title=1, version=2}). kubectl asks for v2 in protobuf only to find
# schemas for client-side validation; with none it skips that validation.
OPENAPI_V2_PB = _pb_field(1, b"2.0") + _pb_field(
    2, _pb_field(1, b"Kubernetes") + _pb_field(2, b"v1.32.0")
)
