"""Reconcile one InferenceRun by key, level-triggered, in numbered steps.

It reads the cached world, computes desired children and status with pure
functions, converges with idempotent writes, and returns when to look again.
Transient API errors propagate (the work queue retries them with backoff);
user errors become the `Accepted` condition plus a Warning event and are not
retried until the run or its config changes. `now` and the cluster are
injected: no module-level client, no global state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from contracts.run import ConfigRef, InferenceRunSpec, InferenceRunStatus
from controller.core import builders, names
from controller.core.builders import Resolved
from controller.core.events import transition_events
from controller.core.jobs import Obj, is_finished, job_state, runner_exit
from controller.core.ports import Cluster
from controller.core.resolve import parse_run_spec, resolve
from controller.core.settings import Settings
from controller.core.status import (
    Observed,
    lost_job_status,
    normalize,
    one_shot_status,
    previous_status,
    scheduled_status,
)
from controller.core.validation import Problem
from controller.reconcile.act import (
    UserError,
    ensure_config_map,
    ensure_cron_job,
    ensure_exists,
    is_owned_by,
)

log = logging.getLogger(__name__)
PLACEHOLDER_SPEC = InferenceRunSpec(config_ref=ConfigRef(name="invalid"))
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Result:
    """When to reconcile this key again regardless of events (None: on events only)."""

    requeue_after: float | None = None


def is_deleting(obj: Obj) -> bool:
    """True when the object has a deletionTimestamp."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def should_delete(policy: str, phase: str | None) -> bool:
    """Whether autoDeletePolicy removes something that finished in `phase`."""
    if policy == "DeleteOnCompletion":
        return phase in ("Succeeded", "Failed")
    return policy == "DeleteOnSuccess" and phase == "Succeeded"


class Reconciler:
    """Turns an InferenceRun into a contract ConfigMap plus a Job or CronJob, and reports."""

    def __init__(self, cluster: Cluster, settings: Settings, *, now: Callable[[], datetime]):
        self.cluster = cluster
        self.settings = settings
        self.now = now

    def reconcile(self, key: str) -> Result:
        """Converge one run; raises ApiError on transient failures."""
        namespace, name = names.split_key(key)
        run = self.cluster.get_run(namespace, name)  # 1. read the run; gone means done
        if run is None or is_deleting(run):
            return Result()
        obs, problem = self._observe(run)  # 2. observe what the run owns
        self._find_lost_job(obs)
        resolved = None
        if problem is None and not self._is_started_one_shot(obs):
            resolved, problem = self._resolve(obs)  # 3. find the config and validate
        if resolved is not None:
            problem = self._converge(obs, resolved)  # 4. contract ConfigMap + Job/CronJob
        status = self._derive(obs, problem)  # 5. status from the observed children
        self._publish(obs, status)  # 6. patch /status once, record events
        return self._clean_up(obs, status, resolved)  # 7. autoDeletePolicy, next look

    def _observe(self, run: Obj) -> tuple[Observed, Problem | None]:
        meta = run["metadata"]
        spec, problem = parse_run_spec(run)
        children = self.cluster.children(meta["namespace"], meta["name"])
        obs = Observed(
            run=run,
            spec=spec or PLACEHOLDER_SPEC,
            previous=previous_status(run),
            config_map=children.config_map,
            job=children.job,
            cron_job=children.cron_job,
            jobs=children.jobs,
            pods=children.pods,
        )
        return obs, problem

    def _is_started_one_shot(self, obs: Observed) -> bool:
        # A one-shot run is frozen once its Job exists or existed (its name is in the
        # status): config changes never touch it, and a deleted Job is never re-created.
        return not obs.spec.is_scheduled and (obs.job is not None or self._is_job_lost(obs))

    def _is_job_lost(self, obs: Observed) -> bool:
        return not obs.spec.is_scheduled and obs.job is None and bool(obs.previous.job_name)

    def _find_lost_job(self, obs: Observed) -> None:
        # The status names a Job the cache lacks: ask the API server once before believing
        # it is gone (a cache may lag), unless the run already finished.
        if not self._is_job_lost(obs) or obs.previous.phase in FINISHED:
            return
        meta = obs.run["metadata"]
        live = self.cluster.read("Job", meta["namespace"], str(obs.previous.job_name))
        if live is not None and is_owned_by(live, meta["uid"]):
            obs.job = live

    def _resolve(self, obs: Observed) -> tuple[Resolved | None, Problem | None]:
        outcome = resolve(obs.run, obs.spec, lookup=self.cluster.get_config, settings=self.settings)
        if isinstance(outcome, Problem):
            return None, outcome
        return outcome, None

    def _converge(self, obs: Observed, resolved: Resolved) -> Problem | None:
        try:
            obs.config_map = ensure_config_map(
                self.cluster, builders.build_config_map(resolved), observed=obs.config_map
            )
            if obs.spec.is_scheduled:
                desired = builders.build_cron_job(resolved, self.settings)
                obs.cron_job = ensure_cron_job(self.cluster, desired, observed=obs.cron_job)
            else:
                desired = builders.build_job(resolved, self.settings)
                obs.job = ensure_exists(self.cluster, "Job", desired, observed=obs.job)
        except UserError as exc:
            return exc.problem
        return None

    def _derive(self, obs: Observed, problem: Problem | None) -> InferenceRunStatus:
        for job in self._jobs_missing_exit(obs):
            meta = job["metadata"]
            obs.pods += self.cluster.job_pods(meta["namespace"], meta["name"])
        now = self.now().replace(microsecond=0)
        if self._is_job_lost(obs):
            return lost_job_status(obs, now=now)
        if obs.spec.is_scheduled:
            return scheduled_status(obs, problem=problem, now=now)
        return one_shot_status(obs, problem=problem, now=now)

    def _jobs_missing_exit(self, obs: Observed) -> list[Obj]:
        # The Job's watch can overtake its pods' watch: read a finished Job's pods once,
        # live, on the pass that sees it finish (not on every resync once the status
        # records it). A scheduled run's Job may be deleted right after this pass
        # (autoDeletePolicy), so its result must be read now or never.
        if obs.spec.is_scheduled:
            recorded = {e.job_name for e in obs.previous.history if e.phase in FINISHED}
            candidates = [j for j in obs.jobs if j["metadata"]["name"] not in recorded]
        elif obs.previous.result is None and obs.previous.phase not in FINISHED:
            candidates = [obs.job] if obs.job is not None else []
        else:
            candidates = []
        return [
            job
            for job in candidates
            if is_finished(job_state(job))
            and runner_exit(obs.pods, job["metadata"]["name"]) is None
        ]

    def _publish(self, obs: Observed, status: InferenceRunStatus) -> None:
        new, old = normalize(status), normalize(obs.run.get("status"))
        if new == old:
            return
        patch: Obj = {**{k: None for k in old if k not in new}, **new}
        meta = obs.run["metadata"]
        obs.run = self.cluster.patch_status(meta["namespace"], meta["name"], patch)
        for event in transition_events(obs.previous, status):
            self.cluster.emit_event(
                obs.run, type_=event.type, reason=event.reason, message=event.message
            )
        obs.previous = status

    def _clean_up(
        self, obs: Observed, status: InferenceRunStatus, resolved: Resolved | None
    ) -> Result:
        if obs.spec.is_scheduled:
            return self._clean_up_jobs(obs, status, resolved)
        if obs.job is None or status.phase not in ("Succeeded", "Failed"):
            return Result()
        annotations = obs.job["metadata"].get("annotations") or {}
        policy = annotations.get(names.POLICY_ANNOTATION, "None")
        if not should_delete(policy, status.phase):
            return Result()
        delay = int(annotations.get(names.DELAY_ANNOTATION) or 0)
        wait = self._remaining(status.completion_time, delay)
        if wait > 0:
            return Result(requeue_after=wait)
        meta = obs.run["metadata"]
        self.cluster.delete("InferenceRun", meta["namespace"], meta["name"], uid=meta["uid"])
        return Result()

    def _remaining(self, finished: datetime | None, delay: int) -> float:
        if finished is None or delay <= 0:
            return 0.0
        return (finished + timedelta(seconds=delay) - self.now()).total_seconds()

    def _clean_up_jobs(
        self, obs: Observed, status: InferenceRunStatus, resolved: Resolved | None
    ) -> Result:
        waits = [self._until_next(status)]
        if resolved is not None:
            policy = resolved.config_spec.auto_delete_policy
            delay = resolved.config_spec.auto_delete_delay_seconds
            for job in obs.jobs:
                waits.append(self._clean_up_job(job, policy=policy, delay=delay))
        pending = [w for w in waits if w is not None and w > 0]
        return Result(requeue_after=min(pending) if pending else None)

    def _clean_up_job(self, job: Obj, *, policy: str, delay: int) -> float | None:
        state = job_state(job)
        if not is_finished(state) or not should_delete(policy, state.phase) or is_deleting(job):
            return None
        wait = self._remaining(state.finish_time, delay)
        if wait > 0:
            return wait
        meta = job["metadata"]
        self.cluster.delete("Job", meta["namespace"], meta["name"], uid=meta["uid"])
        return None

    def _until_next(self, status: InferenceRunStatus) -> float | None:
        if status.next_schedule_time is None:
            return None
        seconds = (status.next_schedule_time - self.now()).total_seconds() + 1
        return min(max(seconds, 1.0), self.settings.polling_interval)
