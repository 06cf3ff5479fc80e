"""Decode the few Kubernetes protobuf bodies kubectl's typed generators send.

kubectl 1.32 sends `application/vnd.kubernetes.protobuf` for typed commands
such as `kubectl create namespace|configmap|secret|serviceaccount|role|rolebinding|token`
and `kubectl auth can-i|whoami`. Those kinds are small, so
their messages are described here field by field (from k8s.io/api generated.proto)
and decoded into the JSON shape; any other protobuf body is refused with 415.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

MAGIC = b"k8s\x00"
# message -> field number -> (json name, type); "[]" prefix = repeated.
MESSAGES: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {1: ("typeMeta", "TypeMeta"), 2: ("raw", "bytes")},
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": {
        1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
        5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
        8: ("creationTimestamp", "Time"), 11: ("labels", "map"), 12: ("annotations", "map"),
        13: ("ownerReferences", "[]OwnerReference"), 14: ("finalizers", "[]string"),
    },
    "OwnerReference": {
        1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
        5: ("apiVersion", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool"),
    },
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "ConfigMap": {
        1: ("metadata", "ObjectMeta"), 2: ("data", "map"), 3: ("binaryData", "bytesmap"),
        4: ("immutable", "bool"),
    },
    "Secret": {
        1: ("metadata", "ObjectMeta"), 2: ("data", "bytesmap"), 3: ("type", "string"),
        4: ("stringData", "map"), 5: ("immutable", "bool"),
    },
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "[]string")},
    # ServiceAccounts and RBAC (kubectl create serviceaccount|role|rolebinding|...).
    "ServiceAccount": {
        1: ("metadata", "ObjectMeta"), 3: ("imagePullSecrets", "[]LocalObjectReference"),
        4: ("automountServiceAccountToken", "bool"),
    },
    "LocalObjectReference": {1: ("name", "string")},
    "Role": {1: ("metadata", "ObjectMeta"), 2: ("rules", "[]PolicyRule")},
    "ClusterRole": {
        1: ("metadata", "ObjectMeta"), 2: ("rules", "[]PolicyRule"),
        3: ("aggregationRule", "AggregationRule"),
    },
    "PolicyRule": {
        1: ("verbs", "[]string"), 2: ("apiGroups", "[]string"), 3: ("resources", "[]string"),
        4: ("resourceNames", "[]string"), 5: ("nonResourceURLs", "[]string"),
    },
    "AggregationRule": {1: ("clusterRoleSelectors", "[]LabelSelector")},
    "LabelSelector": {1: ("matchLabels", "map"), 2: ("matchExpressions", "[]Requirement")},
    "Requirement": {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", "[]string")},
    "RoleBinding": {1: ("metadata", "ObjectMeta"), 2: ("subjects", "[]Subject"),
                    3: ("roleRef", "RoleRef")},
    "ClusterRoleBinding": {1: ("metadata", "ObjectMeta"), 2: ("subjects", "[]Subject"),
                           3: ("roleRef", "RoleRef")},
    "Subject": {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                4: ("namespace", "string")},
    "RoleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    # kubectl create token, kubectl auth can-i, kubectl auth whoami.
    "TokenRequest": {1: ("metadata", "ObjectMeta"), 2: ("spec", "TokenRequestSpec")},
    "TokenRequestSpec": {
        1: ("audiences", "[]string"), 3: ("boundObjectRef", "BoundObjectReference"),
        4: ("expirationSeconds", "int"),
    },
    "BoundObjectReference": {1: ("kind", "string"), 2: ("apiVersion", "string"),
                             3: ("name", "string"), 4: ("uid", "string")},
    "SelfSubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "AccessReviewSpec")},
    "SubjectAccessReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "AccessReviewSpec")},
    "AccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes"),
        2: ("nonResourceAttributes", "NonResourceAttributes"), 3: ("user", "string"),
        4: ("groups", "[]string"), 6: ("uid", "string"),
    },
    "ResourceAttributes": {
        1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"),
        4: ("version", "string"), 5: ("resource", "string"), 6: ("subresource", "string"),
        7: ("name", "string"),
    },
    "NonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta")},
    "SelfSubjectRulesReview": {1: ("metadata", "ObjectMeta"), 2: ("spec", "RulesReviewSpec")},
    "RulesReviewSpec": {1: ("namespace", "string")},
}  # fmt: skip
KINDS = {"ConfigMap", "Secret", "Namespace", "ServiceAccount", "Role", "ClusterRole",
         "RoleBinding", "ClusterRoleBinding", "TokenRequest", "SelfSubjectAccessReview",
         "SubjectAccessReview", "SelfSubjectReview", "SelfSubjectRulesReview"}  # fmt: skip


class Unsupported(ValueError):
    """A protobuf body of a kind the emulator cannot decode."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((num, value))
        elif wire == 2:
            size, pos = _varint(data, pos)
            out.append((num, data[pos : pos + size]))
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise Unsupported(f"unsupported wire type {wire}")
    return out


def _message(data: bytes, name: str) -> dict[str, Any]:
    spec = MESSAGES[name]
    out: dict[str, Any] = {}
    for num, raw in _fields(data):
        if num not in spec:
            continue
        field, typ = spec[num]
        repeated = typ.startswith("[]")
        value = _value(raw, typ.removeprefix("[]"))
        if not repeated and (value in ("", b"") or (value == 0 and typ == "int")):
            continue  # proto2 zero values are Go zero values: omitted in JSON
        if typ in ("map", "bytesmap"):
            out.setdefault(field, {}).update(value)
        elif repeated:
            out.setdefault(field, []).append(value)
        else:
            out[field] = value
    return out


def _value(raw: int | bytes, typ: str) -> Any:
    if typ == "int":
        return raw
    if typ == "bool":
        return bool(raw)
    assert isinstance(raw, bytes)
    if typ == "string":
        return raw.decode()
    if typ == "bytes":
        return raw
    if typ in ("map", "bytesmap"):
        entry = dict(_fields(raw))
        key = bytes(entry.get(1, b"")).decode()
        val = bytes(entry.get(2, b""))
        return {key: base64.b64encode(val).decode() if typ == "bytesmap" else val.decode()}
    if typ == "Time":
        secs = _message(raw, "Time").get("seconds", 0)
        return datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return _message(raw, typ)


def decode(body: bytes) -> dict[str, Any]:
    """A `k8s\\0`-enveloped protobuf object as the equivalent JSON object."""
    if not body.startswith(MAGIC):
        raise Unsupported("missing protobuf envelope")
    envelope = _message(body[len(MAGIC) :], "Unknown")
    type_meta = envelope.get("typeMeta", {})
    kind = type_meta.get("kind", "")
    if kind not in KINDS:
        raise Unsupported(f"protobuf bodies of kind {kind!r} are not supported by the emulator")
    obj = _message(envelope.get("raw", b""), kind)
    return {"apiVersion": type_meta.get("apiVersion", "v1"), "kind": kind, **obj}
