"""Where each replica goes: by free capacity, one replica per host, and where it stays.

The record of placements is the hosts' `status.assignments` (written by the controller):
capacity is counted from it, and a controller restart continues from it. Each pass:

1. keeps every assignment whose InferenceModel still wants that model, on a host that is
   not lost (hosts.py: checked and failing, refused, going away), still selected and still
   able to serve it; the rest are *released* (unloaded, where the host can be asked);
2. drops replicas beyond `replicas` (the last hosts by name first);
3. places missing replicas, one InferenceModel at a time in name order, on the selected
   ready hosts that hold none of its replicas, serve or can load the model, and have room,
   taking the host with the largest share of free capacity first (name breaks ties).

So a replica on a host that fails its health checks *moves* to another host when one is
eligible; with none, the InferenceModel runs with fewer replicas and says why
(`shortfall`), and gets its replica back when a host becomes eligible. Nothing is moved
back when the failed host returns: placements are sticky.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from contracts.fleets import HostAssignment, HostSelector
from controller.core.fleets.capacity import Room, format_bytes
from controller.core.fleets.hosts import HostView, taken
from controller.core.fleets.selector import matches

SHOWN_REASONS = 4  # hosts named in a shortfall message


@dataclass(frozen=True)
class ModelWant:
    """What one InferenceModel asks of the fleet."""

    name: str
    model_name: str
    selector: HostSelector
    replicas: int
    slots: int = 1
    memory: Decimal | None = None
    scheme: str = "http"

    def assignment(self, now: datetime) -> HostAssignment:
        """A new assignment of this model."""
        memory = format_bytes(self.memory) if self.memory is not None else None
        return HostAssignment(
            inference_model=self.name,
            model_name=self.model_name,
            slots=self.slots,
            memory=memory,
            since=now,
        )


@dataclass(frozen=True)
class Plan:
    """Assignments per host, what to unload where, and why a model has too few replicas."""

    assignments: dict[str, tuple[HostAssignment, ...]]
    released: tuple[tuple[str, str], ...] = ()
    shortfall: dict[str, str] = field(default_factory=dict)


def place(hosts: Sequence[HostView], models: Sequence[ModelWant], *, now: datetime) -> Plan:
    """The placements after this pass (see the module doc)."""
    wants = {m.name: m for m in models}
    by_name = {h.name: h for h in hosts}
    kept: dict[str, list[HostAssignment]] = {h.name: [] for h in hosts}
    released: list[tuple[str, str]] = []
    for host in hosts:
        for item in host.previous.assignments:
            if _keeps(host, item, wants.get(item.inference_model)):
                kept[host.name].append(item)
            else:
                released.append((host.name, item.model_name))
    shortfall: dict[str, str] = {}
    for want in sorted(models, key=lambda m: m.name):
        released += _trim(kept, want)
        missing = want.replicas - _count(kept, want.name)
        if missing > 0 and (why := _fill(kept, by_name, want, missing, now=now)):
            shortfall[want.name] = why
    still = {(h, a.model_name) for h, items in kept.items() for a in items}
    unload = tuple(sorted({r for r in released if r not in still and r[0] in by_name}))
    return Plan({h: tuple(items) for h, items in kept.items()}, unload, shortfall)


def _keeps(host: HostView, item: HostAssignment, want: ModelWant | None) -> bool:
    return (
        want is not None
        and want.model_name == item.model_name
        and not host.is_lost
        and matches(want.selector, host.labels)
        and host.scheme == want.scheme
        and (not host.health.checked or host.can_serve(want.model_name))
    )


def _count(kept: dict[str, list[HostAssignment]], model: str) -> int:
    return sum(1 for items in kept.values() for a in items if a.inference_model == model)


def _trim(kept: dict[str, list[HostAssignment]], want: ModelWant) -> list[tuple[str, str]]:
    """Drop replicas beyond `replicas`, last hosts by name first; what they released."""
    holders = sorted((h for h, items in kept.items() if _holds(items, want.name)), reverse=True)
    extra = holders[: max(0, len(holders) - want.replicas)]
    for host in extra:
        kept[host] = [a for a in kept[host] if a.inference_model != want.name]
    return [(host, want.model_name) for host in extra]


def _holds(items: list[HostAssignment], model: str) -> bool:
    return any(a.inference_model == model for a in items)


def _free(host: HostView, items: list[HostAssignment]) -> Room:
    slots, memory = taken(tuple(items))
    total = host.total
    return total.minus(slots, memory if total.memory is not None else None)


def _fill(
    kept: dict[str, list[HostAssignment]],
    hosts: dict[str, HostView],
    want: ModelWant,
    missing: int,
    *,
    now: datetime,
) -> str:
    """Place up to `missing` replicas; why fewer were placed ("" when all were)."""
    reasons: dict[str, str] = {}
    candidates = []
    for name, host in sorted(hosts.items()):
        why = _unfit(host, kept[name], want)
        if why:
            reasons[name] = why
        else:
            candidates.append(host)
    candidates.sort(key=lambda h: (-_free(h, kept[h.name]).share(h.total), h.name))
    for host in candidates[:missing]:
        kept[host.name].append(want.assignment(now))
    placed = min(missing, len(candidates))
    if placed == missing:
        return ""
    return _shortfall_text(want, missing - placed, reasons)


def _unfit(host: HostView, items: list[HostAssignment], want: ModelWant) -> str:
    """Why `host` cannot take a replica of `want` ("" when it can)."""
    if _holds(items, want.name):
        return "holds a replica already"
    if not matches(want.selector, host.labels):
        return "not selected by hostSelector"
    if not host.can_place:
        return _not_placeable(host)
    if host.scheme != want.scheme:
        return f"speaks {host.scheme} while the other selected hosts speak {want.scheme}"
    if not host.can_serve(want.model_name):
        return f'does not serve "{want.model_name}" and its admin protocol cannot load models'
    if not _free(host, items).fits(want.slots, want.memory):
        return _no_room(host, want)
    return ""


def _not_placeable(host: HostView) -> str:
    if host.problem is not None:
        return f"refused: {host.problem.message}"
    if host.spec is not None and host.spec.unschedulable and host.is_ready:
        return "unschedulable"
    if not host.health.checked:
        return "not checked yet"
    return f"not ready ({host.health.last_error or 'health check failing'})"


def _no_room(host: HostView, want: ModelWant) -> str:
    if host.total.memory is not None and want.memory is None:
        return "counts memory, and the InferenceModel sets no resources.memory"
    return "no free capacity"


def _shortfall_text(want: ModelWant, short: int, reasons: dict[str, str]) -> str:
    placed = want.replicas - short
    shown = [
        f"{h}: {why}" for h, why in sorted(reasons.items()) if why != "holds a replica already"
    ]
    more = len(shown) - SHOWN_REASONS
    listed = "; ".join(shown[:SHOWN_REASONS]) + (f"; and {more} more" if more > 0 else "")
    if not shown:
        listed = "no InferenceHost in the namespace is selected"
    return f"{placed} of {want.replicas} replicas placed: no other host can take one ({listed})"
