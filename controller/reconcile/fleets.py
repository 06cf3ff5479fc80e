"""Reconcile one namespace's fleet by key (`Fleet/<namespace>`): observe, decide, act.

1. observe: the hosts, InferenceModels and the Models they name, their Services and
   EndpointSlices, from the caches; each host's token where it has credentials;
2. track: hand the prober exactly the hosts to check (HostAgent.track), and read back what
   its checks and admin calls found;
3. decide: `controller.core.fleets.decide` places the replicas and returns the statuses,
   the child writes and the admin calls;
4. act: write the Services and EndpointSlices; an answer the decision did not assume (a
   name taken, a refusal) becomes the InferenceModel's problem and the fleet is decided
   again;
5. publish each status once, if it changed, with the events of its transitions;
6. ask the prober for the loads and unloads, and delete the EndpointSlices no longer wanted.

The prober wakes this key whenever a host's health or an admin call's outcome changes, so
nothing here polls. Transient API errors propagate (the work queue retries with backoff).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from contracts.fleets import InferenceHostStatus, InferenceModelStatus
from controller.core.fleets.decide import FleetDecision, Write, decide_fleet
from controller.core.fleets.events import host_events, model_events
from controller.core.fleets.health import HostTarget
from controller.core.fleets.hosts import credentials_ref, target_of
from controller.core.fleets.observed import FleetChildren, FleetObserved
from controller.core.fleets.ports import FleetCluster, HostAgent, StatusKind
from controller.core.fleets.settings import FleetSettings
from controller.core.ports import ApiError, Obj
from controller.core.validation import Problem
from controller.core.writes import Create
from controller.reconcile.act import is_forbidden, is_refusal
from controller.reconcile.runs import Result

PASSES = 4  # write-and-decide-again passes, each settling at least one answer


@dataclass(frozen=True)
class Tracked:
    """The observation, and the prober's targets by host name."""

    obs: FleetObserved
    targets: Mapping[str, HostTarget]


class FleetReconciler:
    """Places InferenceModels on InferenceHosts and publishes them as Services."""

    def __init__(
        self,
        cluster: FleetCluster,
        agent: HostAgent,
        settings: FleetSettings,
        *,
        now: Callable[[], datetime],
    ) -> None:
        self.cluster = cluster
        self.agent = agent
        self.settings = settings
        self.now = now

    def reconcile(self, namespace: str) -> Result:
        """Converge one namespace's fleet; ApiError when transient."""
        tracked = self._observe(namespace)  # 1-2. read once, track the hosts
        decision, retry = self._converge(tracked.obs)  # 3-4. decide, write, decide again
        publish(self.cluster, tracked.obs, decision)  # 5. statuses and events
        if retry is not None:
            raise retry
        self._call(tracked.targets, decision)  # 6. admin calls and stale slices
        for item in decision.deletions:
            self.cluster.delete(item.kind, item.namespace, item.name, uid=item.uid)
        return Result()

    def _observe(self, namespace: str) -> Tracked:
        hosts = self.cluster.hosts(namespace)
        models = self.cluster.inference_models(namespace)
        problems: dict[str, Problem] = {}
        targets: dict[str, HostTarget] = {}
        for host in hosts:
            name = str(host["metadata"]["name"])
            token = self._token(host, namespace)
            if isinstance(token, Problem):
                problems[name] = token
            elif (target := target_of(host, token=token)) is not None:
                targets[name] = target
        self.agent.track(namespace, list(targets.values()))
        obs = FleetObserved(
            namespace=namespace,
            hosts=hosts,
            models=models,
            model_sources=self._sources(namespace, models),
            children=self.cluster.children(namespace),
            health={n: h for n in targets if (h := self.agent.health(namespace, n)) is not None},
            ops={n: self.agent.ops(namespace, n) for n in targets},
            protocols=self.agent.protocols(),
            credential_problems=problems,
        )
        return Tracked(obs, targets)

    def _token(self, host: Obj, namespace: str) -> str | Problem | None:
        ref = credentials_ref(host)
        if ref is None:
            return None
        return self.cluster.host_credentials(namespace, *ref)

    def _sources(self, namespace: str, models: list[Obj]) -> dict[str, Obj]:
        refs = {
            str(ref["name"])
            for m in models
            if isinstance(ref := (m.get("spec") or {}).get("modelRef"), dict) and ref.get("name")
        }
        return {n: obj for n in sorted(refs) if (obj := self.cluster.get_model(namespace, n))}

    def _converge(self, obs: FleetObserved) -> tuple[FleetDecision, ApiError | None]:
        decision = decide_fleet(obs, self.settings, now=self.now())
        for _ in range(PASSES):
            if not decision.writes:
                break
            obs, retry = write(self.cluster, obs, decision.writes)
            decision = decide_fleet(obs, self.settings, now=self.now())
            if retry is not None:
                return decision, retry
        return decision, None

    def _call(self, targets: Mapping[str, HostTarget], decision: FleetDecision) -> None:
        for call in decision.loads:
            if call.host in targets:
                self.agent.load(targets[call.host], call.model, source=call.source)
        for call in decision.unloads:
            if call.host in targets:
                self.agent.unload(targets[call.host], call.model)


def write(
    cluster: FleetCluster, obs: FleetObserved, writes: tuple[Write, ...]
) -> tuple[FleetObserved, ApiError | None]:
    """Apply the writes in order; stop at the first answer the decision did not assume."""
    for item in writes:
        model = _owner(item)
        try:
            answer = _apply(cluster, item)
        except ApiError as exc:
            if not (is_refusal(exc) or is_forbidden(exc)):
                raise
            problem = _refused(item, exc)
            answers = {**obs.answers, model: problem}
            return replace(obs, answers=answers), exc if is_forbidden(exc) else None
        if isinstance(answer, Problem):
            return replace(obs, answers={**obs.answers, model: answer}), None
        obs = replace(obs, children=_with_child(obs.children, answer))
    return obs, None


def _owner(item: Write) -> str:
    """The InferenceModel a child write is for (its owner reference, in every body)."""
    body = item.body if isinstance(item.body, dict) else {}
    refs = (body.get("metadata") or {}).get("ownerReferences") or [{}]
    return str(refs[0].get("name") or "")


def _apply(cluster: FleetCluster, item: Write) -> Obj | Problem:
    if not isinstance(item, Create):
        return cluster.patch(item.kind, item.namespace, item.name, item.body)
    meta = item.body["metadata"]
    try:
        return cluster.create(item.kind, item.body)
    except ApiError as exc:
        if not exc.is_already_exists:
            raise
    live = cluster.read(item.kind, meta["namespace"], meta["name"])
    if live is None:  # deleted in between: the retry creates it
        raise ApiError(409, f"{item.kind} {meta['name']} vanished after AlreadyExists")
    owner = meta["ownerReferences"][0]["uid"]
    refs = (live.get("metadata") or {}).get("ownerReferences") or []
    if any(r.get("controller") and r.get("uid") == owner for r in refs):
        return live
    return Problem(
        "metadata.name",
        "NameConflict",
        f'{item.kind} "{meta["name"]}" already exists and is not owned by this InferenceModel; '
        "longrun leaves it alone: delete it or rename the InferenceModel",
    )


def _refused(item: Write, exc: ApiError) -> Problem:
    name = item.body["metadata"]["name"] if isinstance(item, Create) else item.name
    advice = "retrying with backoff" if is_forbidden(exc) else "fix the InferenceModel"
    return Problem(
        "spec",
        "ChildRejected",
        f'the API server refused {item.kind} "{name}" ({exc.status}): {exc.message}; {advice}',
    )


def _with_child(children: FleetChildren, obj: Obj) -> FleetChildren:
    name = obj["metadata"]["name"]
    if obj.get("kind") == "Service":
        return replace(children, services={**children.services, name: obj})
    slices = [s for s in children.slices if s["metadata"]["name"] != name]
    return replace(children, slices=[*slices, obj])


# -- statuses and events ------------------------------------------------------------------


def publish(cluster: FleetCluster, obs: FleetObserved, decision: FleetDecision) -> None:
    """Patch each /status once when it changed, and record the events of its transitions."""
    for obj in obs.hosts:
        new = decision.hosts.get(obj["metadata"]["name"])
        if new is not None:
            _publish(cluster, "InferenceHost", obj, _wire(new), host_events)
    for obj in obs.models:
        new_model = decision.models.get(obj["metadata"]["name"])
        if new_model is not None:
            _publish(cluster, "InferenceModel", obj, _wire(new_model), model_events)


def _wire(status: InferenceHostStatus | InferenceModelStatus) -> dict[str, Any]:
    return status.to_wire()


def _publish(
    cluster: FleetCluster,
    kind: StatusKind,
    obj: Obj,
    new: dict[str, Any],
    events: Callable[[dict[str, Any], dict[str, Any]], list[tuple[str, str, str]]],
) -> None:
    old = obj.get("status") or {}
    if new == old:
        return
    patch: Obj = {**{k: None for k in old if k not in new}, **new}
    meta = obj["metadata"]
    try:
        stored = cluster.patch_status(kind, meta["namespace"], meta["name"], patch)
    except ApiError as exc:
        if exc.is_not_found:
            return  # deleted meanwhile
        raise
    for type_, reason, message in events(old, new):
        cluster.emit_event({**stored, "kind": kind}, type_=type_, reason=reason, message=message)  # type: ignore[arg-type]
