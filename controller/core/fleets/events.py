"""Events of a fleet's transitions: a host turning ready or not, a model's phase changing."""

from __future__ import annotations

from typing import Any

Event = tuple[str, str, str]  # type, reason, message


def host_events(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """A host became ready, or stopped being ready (with why)."""
    if bool(old.get("ready")) == bool(new.get("ready")) or new.get("ready") is None:
        return []
    if new.get("ready"):
        return [
            ("Normal", "HostReady", f"the host passes its health checks at {new.get('address')}")
        ]
    ready: dict[str, Any] = next(
        (c for c in new.get("conditions") or [] if c.get("type") == "Ready"), {}
    )
    return [
        ("Warning", str(ready.get("reason") or "HostNotReady"), str(ready.get("message") or ""))
    ]


def model_events(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """Replicas placed on or taken off hosts, and a new phase."""
    events: list[Event] = []
    before = {p.get("host") for p in old.get("placements") or []}
    after = {p.get("host") for p in new.get("placements") or []}
    for host in sorted(after - before):
        events.append(("Normal", "Placed", f"a replica was placed on InferenceHost {host}"))
    for host in sorted(before - after):
        events.append(("Normal", "Removed", f"the replica on InferenceHost {host} was removed"))
    phase, message = new.get("phase"), new.get("message") or ""
    if phase != old.get("phase"):
        kind = "Warning" if phase in ("Failed", "Degraded") else "Normal"
        text = f"{phase}: {new.get('readyReplicas', 0)}/{new.get('replicas', 0)} ready"
        events.append((kind, str(phase), f"{text}; {message}" if message else text))
    return events
