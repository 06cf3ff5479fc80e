"""Decide: a namespace's hosts and InferenceModels in; statuses, child writes and admin calls out.

One straight flow: view every host (hosts.py) and model (models.py), refuse models whose
Service name is taken, place the replicas (placement.py), then for each model build its
Service and EndpointSlices (builders.py) from the ready placements, compare with what is
there (create what is missing, patch what drifted, delete slices no longer wanted), and
list the admin calls: a load for every replica still loading, an unload for every model a
host no longer needs. The calls are asked of the prober, which runs them in the background
and de-duplicates them; their outcome comes back as observed `ops` and health.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from contracts.fleets import InferenceHostStatus, InferenceModelStatus
from controller.core.decide import is_owned_by
from controller.core.fleets import builders, names
from controller.core.fleets.builders import Endpoint
from controller.core.fleets.hosts import HostView, host_view
from controller.core.fleets.models import ModelView, model_view, scheme_of, want_of
from controller.core.fleets.observed import FleetObserved
from controller.core.fleets.placement import Plan, place
from controller.core.fleets.ports import FleetKind
from controller.core.fleets.settings import FleetSettings
from controller.core.fleets.status import Placed, host_status, model_status, placement_state
from controller.core.ports import Obj
from controller.core.validation import Problem
from controller.core.writes import Create, Delete, Patch

Write = Create[FleetKind] | Patch[FleetKind]


@dataclass(frozen=True)
class AdminCall:
    """One admin call to ask of a host: load or unload `model`."""

    host: str
    model: str
    source: str | None = None


@dataclass(frozen=True)
class FleetDecision:
    """Statuses by name, child writes and deletions, and the admin calls to make."""

    hosts: dict[str, InferenceHostStatus]
    models: dict[str, InferenceModelStatus]
    writes: tuple[Write, ...] = ()
    deletions: tuple[Delete[FleetKind], ...] = ()
    loads: tuple[AdminCall, ...] = ()
    unloads: tuple[AdminCall, ...] = ()


def decide_fleet(obs: FleetObserved, settings: FleetSettings, *, now: datetime) -> FleetDecision:
    """What to write and ask for a namespace's fleet, and its statuses."""
    stamp = now.replace(microsecond=0)
    hosts = [_view(obs, o) for o in obs.hosts]
    views = [_checked(v, obs) for v in (model_view(o, obs.model_sources) for o in obs.models)]
    placeable = [v for v in views if v.is_placeable]
    plan = place(hosts, [want_of(v, hosts) for v in placeable], now=stamp)
    by_host = {h.name: h for h in hosts}
    host_statuses = {
        h.name: host_status(
            h, plan.assignments.get(h.name, ()), ops=obs.ops.get(h.name, {}), settings=settings,
            now=stamp,
        )
        for h in hosts
    }  # fmt: skip
    placed = _placed(views, plan, by_host, obs)
    model_statuses: dict[str, InferenceModelStatus] = {}
    writes: list[Write] = []
    wanted_slices: set[str] = set()
    for view in views:
        endpoint = _endpoint(view, hosts, settings)
        model_statuses[view.name] = model_status(
            view,
            placed.get(view.name, []),
            shortfall=plan.shortfall.get(view.name),
            endpoint=endpoint,
            now=stamp,
        )
        if view.spec is not None and not view.is_deleting and view.problem is None:
            children = _children(view, placed.get(view.name, []))
            wanted_slices |= {c["metadata"]["name"] for c in children[1:]}
            writes += _writes(children, obs)
    return FleetDecision(
        hosts=host_statuses,
        models=model_statuses,
        writes=tuple(writes),
        deletions=_stale_slices(obs, wanted_slices),
        loads=_loads(placed, views),
        unloads=_unloads(plan, by_host),
    )


def _view(obs: FleetObserved, obj: Obj) -> HostView:
    name = str(obj["metadata"]["name"])
    return host_view(
        obj,
        obs.health.get(name),
        protocols=obs.protocols,
        credential_problem=obs.credential_problems.get(name),
    )


def _checked(view: ModelView, obs: FleetObserved) -> ModelView:
    """The view with the API server's refusal, or a taken Service name, as its problem."""
    if view.problem is not None or view.spec is None:
        return view
    problem = obs.answers.get(view.name) or _name_taken(view, obs)
    return replace(view, problem=problem) if problem is not None else view


def _name_taken(view: ModelView, obs: FleetObserved) -> Problem | None:
    service = obs.children.services.get(names.service_name(view.name))
    if service is None or is_owned_by(service, view.identity.uid):
        return None
    return Problem(
        "metadata.name",
        "NameConflict",
        f'Service "{names.service_name(view.name)}" already exists and is not owned by this '
        "InferenceModel; longrun leaves it alone: delete it or rename the InferenceModel",
    )


def _placed(
    views: Sequence[ModelView], plan: Plan, hosts: dict[str, HostView], obs: FleetObserved
) -> dict[str, list[Placed]]:
    previous = {(v.name, p.host): p for v in views for p in v.previous.placements}
    found: dict[str, list[Placed]] = {}
    for host_name, assignments in sorted(plan.assignments.items()):
        host = hosts[host_name]
        for item in assignments:
            state, message = placement_state(
                host,
                item.model_name,
                ops=obs.ops.get(host_name, {}),
                previous=previous.get((item.inference_model, host_name)),
            )
            found.setdefault(item.inference_model, []).append(Placed(host, item, state, message))
    return found


def _endpoint(view: ModelView, hosts: list[HostView], settings: FleetSettings) -> str | None:
    if view.spec is None or view.problem is not None:
        return None
    scheme = scheme_of(view, hosts)
    return builders.service_endpoint(
        view.identity, view.spec.port, settings.cluster_domain, scheme=scheme
    )


def _children(view: ModelView, placed: list[Placed]) -> list[Obj]:
    """The Service first, then the EndpointSlices of the placements with an address."""
    assert view.spec is not None
    endpoints = [
        Endpoint(p.host.name, address, p.host.port, p.state == "Ready")
        for p in placed
        if (address := p.host.health.address or p.host.previous.address)
    ]
    service = builders.build_service(view.identity, view.spec.port)
    return [service, *builders.build_slices(view.identity, endpoints)]


def _writes(children: list[Obj], obs: FleetObserved) -> list[Write]:
    existing = {s["metadata"]["name"]: s for s in obs.children.slices}
    writes: list[Write] = []
    for desired in children:
        kind: FleetKind = desired["kind"]
        name = desired["metadata"]["name"]
        current = (obs.children.services if kind == "Service" else existing).get(name)
        if current is None:
            writes.append(Create(kind, desired))
        elif builders.hash_of(current) != builders.hash_of(desired):
            writes.append(Patch(kind, obs.namespace, name, _drift_patch(desired)))
    return writes


def _drift_patch(desired: Obj) -> Obj:
    meta = desired["metadata"]
    patch: dict[str, Any] = {
        "metadata": {k: meta[k] for k in ("labels", "annotations", "ownerReferences")}
    }
    if desired["kind"] == "Service":
        return {**patch, "spec": {**desired["spec"], "selector": None}}
    return {**patch, "endpoints": desired["endpoints"], "ports": desired["ports"]}


def _stale_slices(obs: FleetObserved, wanted: set[str]) -> tuple[Delete[FleetKind], ...]:
    stale = [s for s in obs.children.slices if s["metadata"]["name"] not in wanted]
    return tuple(
        Delete(
            "EndpointSlice",
            obs.namespace,
            s["metadata"]["name"],
            str(s["metadata"].get("uid", "")),
            why="no host of that address family and port serves the model any more",
        )
        for s in stale
    )


def _loads(placed: dict[str, list[Placed]], views: Sequence[ModelView]) -> tuple[AdminCall, ...]:
    sources = {v.name: v.source for v in views}
    return tuple(
        AdminCall(p.host.name, p.assignment.model_name, sources.get(model))
        for model, items in sorted(placed.items())
        for p in items
        if p.state in ("Loading", "Failed") and p.host.is_ready
    )


def _unloads(plan: Plan, hosts: dict[str, HostView]) -> tuple[AdminCall, ...]:
    return tuple(
        AdminCall(host, model)
        for host, model in plan.released
        if hosts[host].is_ready
        and hosts[host].protocol is not None
        and hosts[host].protocol.can_load  # type: ignore[union-attr]
    )
