"""core/v1 Events and events.k8s.io/v1 Events are two views of one object.

kube-apiserver stores Events once; `kubectl get events` (core/v1) shows what a
controller recorded through events.k8s.io/v1 and vice versa. The emulator stores
the core/v1 shape and converts field names on the way in and out.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import FieldError, invalid, required

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


def validate_core_v1(event: Obj) -> list[FieldError]:
    """What kube-apiserver checks of an Event written through core/v1 (legacyValidateEvent)."""
    return _legacy(event, controller_field="reportingComponent")


def validate_events_v1(event: Obj) -> list[FieldError]:
    """An Event written through events.k8s.io/v1 (in core/v1 shape): the legacy checks,
    then the strict ones of ValidateEventCreate."""
    errors = _legacy(event, controller_field="reportingController")
    if not event.get("eventTime"):
        errors.append(required("eventTime"))
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
    for core, field in (("firstTimestamp", "deprecatedFirstTimestamp"),
                        ("lastTimestamp", "deprecatedLastTimestamp"),
                        ("count", "deprecatedCount"), ("source", "deprecatedSource")):  # fmt: skip
        if event.get(core):
            errors.append(invalid(field, "", "needs to be unset"))
    return errors


def _legacy(event: Obj, *, controller_field: str) -> list[FieldError]:
    """Old-style Events (no eventTime) must sit in their object's namespace; new-style
    ones need who reported them and what was done."""
    namespace = event["metadata"].get("namespace", "")
    involved = (event.get("involvedObject") or {}).get("namespace", "")
    if not event.get("eventTime"):
        allowed = ("", "default") if not involved else (involved,)
        return [] if namespace in allowed else [_namespace_mismatch(involved)]
    errors = []
    if not involved and namespace not in ("default", "kube-system"):
        errors.append(_namespace_mismatch(involved))
    controller = event.get("reportingComponent") or ""
    if not controller:
        errors.append(required(controller_field))
    errors += _qualified_name(controller_field, controller)
    for field, limit in (("reportingInstance", 128), ("action", 128), ("reason", 128)):
        if not event.get(field):
            errors.append(required(field))
        elif len(event[field]) > limit:
            errors.append(
                FieldError(
                    "FieldValueTooLong", field, f"Too long: may not be more than {limit} bytes"
                )
            )
    return errors


def _namespace_mismatch(involved: str) -> FieldError:
    return invalid("involvedObject.namespace", involved, "does not match event.namespace")


_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _qualified_name(path: str, value: str) -> list[FieldError]:
    """apimachinery's IsQualifiedName, with its messages."""
    prefix, _, name = value.rpartition("/")
    errors = []
    if not name:
        errors.append(invalid(path, value, "name part must be non-empty"))
    elif len(name) > 63:
        errors.append(invalid(path, value, "name part must be no more than 63 characters"))
    if not _QUALIFIED.fullmatch(name):
        errors.append(invalid(path, value, "name part must consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"))  # fmt: skip
    if prefix and not _DNS1123_SUBDOMAIN.fullmatch(prefix):
        errors.append(invalid(path, value, "prefix part must be a lowercase RFC 1123 subdomain"))
    return errors
