"""Observe: read everything one reconcile needs about a run, once, into a frozen value.

Reads come from the informer caches, with two live reads where a cache may lag:
- the status names a Job the cache lacks: ask the API server once before believing
  it is gone (unless the run already finished);
- a Job finished but its pods' watch has not delivered the runner's exit yet (of every
  index, for a Job over several pods): list its pods once, on the pass that sees it
  finish (a scheduled run's Job may be deleted right after this pass, so its result is
  read now or never).
And one read no cache holds: the tail of a running runner's log, for its progress, when
the core says it is due (`controller.core.progress`: at most once per interval, only for
a Job that runs; of a Job over several pods, one read per running index). A failed read
is no error: the progress waits for the next interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from contracts.run import ConfigRef, InferenceRunSpec
from controller.core import names, progress
from controller.core.decide import is_deleting, is_owned_by
from controller.core.jobs import is_finished, job_indexes, job_state, runner_exits
from controller.core.ports import ApiError, Cluster, Obj
from controller.core.resolve import parse_run_spec
from controller.core.serving import uses
from controller.core.settings import Settings
from controller.core.status import FINISHED, Observed, RunnerLog, previous_status

log = logging.getLogger(__name__)
Lookup = Callable[[str, str], Obj | None]
PLACEHOLDER_SPEC = InferenceRunSpec(config_ref=ConfigRef(name="invalid"))


def observe(
    cluster: Cluster,
    key: str,
    *,
    settings: Settings,
    now: datetime,
    deployments: Lookup | None = None,
    inference_models: Lookup | None = None,
) -> Observed | None:
    """Everything about the run `key`; None when it is gone or being deleted. `deployments`
    reads a ModelDeployment from the serving adapter's cache (a config's deploymentRef),
    `inference_models` an InferenceModel from the fleet adapter's (`kind: InferenceModel`)."""
    namespace, name = names.split_key(key)
    run = cluster.get_run(namespace, name)
    if run is None or is_deleting(run):
        return None
    spec, problem = parse_run_spec(run)
    children = cluster.children(namespace, name)
    obs = Observed(
        run=run,
        spec=spec or PLACEHOLDER_SPEC,
        previous=previous_status(run),
        config=_config(cluster, run, spec),
        config_map=children.config_map,
        job=children.job,
        cron_job=children.cron_job,
        jobs=children.jobs,
        pods=children.pods,
        stopped_pods=children.stopped_pods,
        workload=children.workload,
        problem=problem,
    )
    obs = _with_deployment(obs, deployments, inference_models)
    obs = _with_lost_job(cluster, obs)
    obs = _with_exits(cluster, obs)
    return _with_runner_log(cluster, obs, settings=settings, now=now)


def _with_deployment(
    obs: Observed, deployments: Lookup | None, inference_models: Lookup | None
) -> Observed:
    target = uses.target_of(obs.config) if obs.config is not None else None
    lookup = inference_models if target and target.kind == "InferenceModel" else deployments
    if target is None or lookup is None:
        return obs
    return Observed(**{**vars(obs), "deployment": lookup(target.namespace, target.name)})


def _config(cluster: Cluster, run: Obj, spec: InferenceRunSpec | None) -> Obj | None:
    if spec is None:
        return None
    namespace = spec.config_ref.namespace or run["metadata"].get("namespace", "")
    return cluster.get_config(namespace, spec.config_ref.name)


def _with_lost_job(cluster: Cluster, obs: Observed) -> Observed:
    if not obs.is_job_lost or obs.previous.phase in FINISHED:
        return obs
    meta = obs.run["metadata"]
    live = cluster.read("Job", meta["namespace"], str(obs.previous.job_name))
    if live is None or not is_owned_by(live, meta["uid"]):
        return obs
    return Observed(**{**vars(obs), "job": live})


def _with_exits(cluster: Cluster, obs: Observed) -> Observed:
    pods = list(obs.pods)
    for job in jobs_missing_exit(obs):
        meta = job["metadata"]
        pods += cluster.job_pods(meta["namespace"], meta["name"])
    return obs if len(pods) == len(obs.pods) else Observed(**{**vars(obs), "pods": pods})


def jobs_missing_exit(obs: Observed) -> list[Obj]:
    """Finished Jobs whose runner exit is not among the cached pods, on the pass that sees
    them finish (not on every resync once the status records them)."""
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
        and len(runner_exits(obs.pods, job["metadata"]["name"])) < job_indexes(job)
    ]


def _with_runner_log(
    cluster: Cluster, obs: Observed, *, settings: Settings, now: datetime
) -> Observed:
    targets = progress.log_targets(obs, settings, now=now)
    if not targets:
        return obs
    texts = {target.index: _tail(cluster, target) for target in targets}
    job_name = targets[0].job_name
    if None in texts:  # one pod
        found = RunnerLog(job_name, texts[None])
    else:
        found = RunnerLog(job_name, shards={i: t for i, t in texts.items() if i is not None})
    return Observed(**{**vars(obs), "runner_log": found})


def _tail(cluster: Cluster, target: progress.LogTarget) -> str:
    try:
        return cluster.pod_log(
            target.namespace,
            target.pod,
            container=target.container,
            tail_lines=progress.TAIL_LINES,
            limit_bytes=progress.LIMIT_BYTES,
        )
    except ApiError as exc:  # RBAC without pods/log, a pod just gone: counts as "nothing new"
        log.info("could not read the progress of pod %s: %s", target.pod, exc)
        return ""
