"""Reconcile one InferenceRun by key, level-triggered: observe, decide, act.

1. observe: read the run and everything it owns or uses, once, into a frozen value;
2. decide: a pure function returns the child writes, the status and the deletions;
3. act: apply the child writes; when the API server answers something the decision
   did not assume (an object refused, a name taken, an object already there), that
   answer is observed and the run decided again;
4. publish the status once, with the events of its transitions;
5. delete what `autoDeletePolicy` says, and say when to look again.

Transient API errors propagate (the work queue retries them with backoff); user
errors become the `Accepted` condition plus a Warning event and are not retried
until the run or its config changes. `now` and the cluster are injected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from controller.core.decide import Decision, decide
from controller.core.ports import ApiError, Cluster
from controller.core.settings import Settings
from controller.core.status import Observed
from controller.reconcile.act import Written, delete, publish, write_children
from controller.reconcile.observe import Lookup, observe

CHILD_FIELDS = {
    "ConfigMap": "config_map",
    "Job": "job",
    "CronJob": "cron_job",
    "Workload": "workload",
}


@dataclass(frozen=True)
class Result:
    """When to reconcile this key again regardless of events (None: on events only)."""

    requeue_after: float | None = None


class Reconciler:
    """Turns an InferenceRun into a contract ConfigMap plus a Job or CronJob, and reports."""

    def __init__(
        self,
        cluster: Cluster,
        settings: Settings,
        *,
        now: Callable[[], datetime],
        deployments: Lookup | None = None,
        inference_models: Lookup | None = None,
    ):
        self.cluster = cluster
        self.settings = settings
        self.now = now
        self.deployments = deployments  # ModelDeployments, for configs with a deploymentRef
        self.inference_models = inference_models  # a deploymentRef of kind InferenceModel

    def reconcile(self, key: str) -> Result:
        """Converge one run; raises ApiError on transient failures."""
        obs = observe(  # 1. read once
            self.cluster,
            key,
            settings=self.settings,
            now=self.now(),
            deployments=self.deployments,
            inference_models=self.inference_models,
        )
        if obs is None:
            return Result()
        decision, retry = self._converge(obs)  # 2-3. decide, write children, decide again
        publish(self.cluster, obs, decision)  # 4. status and events
        if retry is not None:
            raise retry  # reported; the work queue retries with backoff
        delete(self.cluster, decision.deletions)  # 5. autoDeletePolicy
        return Result(decision.requeue_after)

    def _converge(self, obs: Observed) -> tuple[Decision, ApiError | None]:
        decision = decide(obs, self.settings, now=self.now())
        uid = str(obs.run["metadata"].get("uid") or "")
        # Each pass writes children and observes the answers, which settles them: a
        # created or patched child is current next time, a user error stops the writes.
        for _ in CHILD_FIELDS:
            if not decision.writes:
                break
            written = write_children(self.cluster, decision.writes, uid=uid)
            obs = learned(obs, written)
            decision = decide(obs, self.settings, now=self.now())
            if written.retry is not None:
                return decision, written.retry
        return decision, None


def learned(obs: Observed, written: Written) -> Observed:
    """The observation with the API server's answers to our writes folded in."""
    changes: dict[str, object] = {}
    for kind, obj in written.objects:
        changes[CHILD_FIELDS[kind]] = obj
    if written.problem is not None:
        changes["answer"] = written.problem
    return Observed(**{**vars(obs), **changes})
