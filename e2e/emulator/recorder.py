"""Events emitted by the built-in controllers (what `kubectl describe` shows under Events).

Same shape as client-go's event recorder writes: core/v1 Events named
`<object>.<hex>`, with source/reportingComponent set to the controller's name.
"""

from __future__ import annotations

from typing import Any

from .api import Api
from .clock import rfc3339

Obj = dict[str, Any]


def record(api: Api, obj: Obj, *, type_: str, reason: str, message: str, component: str) -> None:
    """Record a core/v1 Event about obj (best effort, like client-go's recorder)."""
    rt = api.registry.get("", "v1", "events")
    meta = obj["metadata"]
    if rt is None:
        return
    now = rfc3339(api.clock.now())
    event = {
        "metadata": {"name": f"{meta['name']}.{api.rng.getrandbits(64):016x}"},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta["uid"],
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": "",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        api.create(rt, meta.get("namespace") or "default", event, owned=True)
    except Exception:  # a recorder never fails the controller (e.g. namespace terminating)
        return
