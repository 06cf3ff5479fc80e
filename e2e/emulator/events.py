"""core/v1 Events and events.k8s.io/v1 Events are two views of one object.

kube-apiserver stores Events once; `kubectl get events` (core/v1) shows what a
controller recorded through events.k8s.io/v1 and vice versa. The emulator stores
the core/v1 shape and converts field names on the way in and out.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, not_supported, required

Obj = dict[str, Any]
EVENTS_API = "events.k8s.io/v1"
# events.k8s.io/v1 name -> core/v1 name
RENAMES = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
BACK = {core: new for new, core in RENAMES.items()}


def to_core(obj: Obj) -> Obj:
    """An events.k8s.io/v1 Event in core/v1 shape (storage form)."""
    out = {RENAMES.get(k, k): v for k, v in obj.items()}
    out["apiVersion"], out["kind"] = "v1", "Event"
    return out


def to_events_v1(obj: Obj) -> Obj:
    out = {BACK.get(k, k): v for k, v in obj.items()}
    out["apiVersion"], out["kind"] = EVENTS_API, "Event"
    return out


def validate_events_v1(obj: Obj) -> list[FieldError]:
    """The required fields events.k8s.io/v1 adds over core/v1."""
    errors = []
    for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not obj.get(field):
            errors.append(required(field))
    if obj.get("type") not in ("Normal", "Warning"):
        errors.append(not_supported("type", obj.get("type"), ["Normal", "Warning"]))
    return errors
