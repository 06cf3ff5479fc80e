"""`pods/binding`: how a scheduler (here: the node agent, e2e/nodeagent) assigns a pod.

As kube-apiserver's BindingREST, answers included (checked against v1.36): the
target is a Node (its existence is not checked there either); a pod already
assigned, or being deleted, answers 409 Conflict on `pods/binding`; a Binding
carrying a uid binds only that pod (a precondition, refused in the storage
layer's words); the pod gets `spec.nodeName`, the Binding's annotations and a
True `PodScheduled` condition; the answer is a `Status` with code 201. A bad
target is a 500 on the real server (a plain error, not a field error), and so it
is here. The write bypasses admission, as the real registry's does: a pod's spec
is otherwise immutable.
"""

from __future__ import annotations

from typing import Any

from .api import Api
from .clock import rfc3339
from .errors import ApiError, bad_request, conflict, not_found

Obj = dict[str, Any]


def bind(api: Api, namespace: str, name: str, body: Any) -> Obj:
    """Assign pod `namespace/name` to the Binding's target node; the 201 Status."""
    target = _target(name, body)
    with api.store.lock:
        pod = api.store.get("pods", namespace, name)
        if pod is None:
            raise not_found("pods", "", name)
        _check(pod, body)
        api.store.put("pods", _bound(pod, target, body, now=rfc3339(api.clock.now())))
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def _target(name: str, body: Any) -> str:
    if not isinstance(body, dict):
        raise bad_request("the body of the request was not a JSON object")
    if (body.get("metadata") or {}).get("name", name) != name:
        raise bad_request("name in URL does not match name in Binding object")
    target = body.get("target") or {}
    kind = target.get("kind", "")
    if kind not in ("", "Node"):
        supported = 'supported values: "Node", "<empty>"'
        raise ApiError(500, f'target.kind: Unsupported value: "{kind}": {supported}')
    if not target.get("name"):
        raise ApiError(500, "target.name: Required value")
    return str(target["name"])


def _check(pod: Obj, body: Obj) -> None:
    meta = pod["metadata"]
    uid = (body.get("metadata") or {}).get("uid")
    if uid and uid != meta["uid"]:
        key = f"/registry/pods/{meta['namespace']}/{meta['name']}"
        why = (
            f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
            f"AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {meta['uid']}"
        )
        raise conflict("pods", "", meta["name"], why)
    if meta.get("deletionTimestamp"):
        why = f"pod {meta['name']} is being deleted, cannot be assigned to a host"
        raise conflict("pods/binding", "", meta["name"], why)
    assigned = pod["spec"].get("nodeName")
    if assigned:
        why = f'pod {meta["name"]} is already assigned to node "{assigned}"'
        raise conflict("pods/binding", "", meta["name"], why)


def _bound(pod: Obj, node: str, body: Obj, *, now: str) -> Obj:
    """The pod assigned: new dicts on every path written (stored objects are shared)."""
    meta = dict(pod["metadata"])
    annotations = (body.get("metadata") or {}).get("annotations")
    if annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    status = dict(pod.get("status") or {})
    scheduled = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": now}  # fmt: skip
    others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    status["conditions"] = [*others, scheduled]
    return {**pod, "metadata": meta, "spec": {**pod["spec"], "nodeName": node}, "status": status}
