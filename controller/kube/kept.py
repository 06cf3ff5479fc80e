"""What the run adapter's caches keep of an object: what the controller reads, no more.

Two rules keep ten thousand cached runs small (docs/controller.md, Capacity):
- a child keeps only what the run controller reads of it: of a Pod, its phase and the
  runner's termination (`controller.core.jobs.runner_exit`, `controller.core.progress.
  running_pods`); of a Job, `spec.suspend`, how many indexes it has (`jobs.job_indexes`)
  and the status fields `controller.core.jobs.job_state` reads; of a Kueue Workload,
  `spec.active`, its conditions and ClusterQueue; of each, the metadata the index and the
  decisions use. Runs, configs, ConfigMaps and CronJobs lose only their managedFields;
- every key, and every string short enough to recur (phases, reasons, times, namespaces),
  is one shared object: JSON decodes each event into fresh strings, so ten thousand runs
  would otherwise hold ten thousand copies of "lastTransitionTime".

Because a child keeps only what is read, an event that changes nothing kept of it
(`is_news`) changes no decision: it wakes no run (a Pod's scheduling, readiness and
finalizer updates, a Job's `ready` count).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from controller.core.ports import Obj

SHARED_LENGTH = 64  # strings up to this long are shared (names, uids, times, reasons)
CHILD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "ownerReferences",
)
JOB_SPEC = ("suspend", "completionMode", "completions")  # the last two: jobs.job_indexes
JOB_STATUS = ("conditions", "startTime", "completionTime", "active", "failed")
JOB_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")


def kept(kind: str, obj: Obj) -> Obj:
    """What the caches keep of `obj` (a new dict; `obj` is left as it is)."""
    project = PROJECTIONS.get(kind, _without_managed_fields)
    kept_obj: Obj = shared(project(obj))
    return kept_obj


def shared(value: Any) -> Any:
    """`value` rebuilt with every key, and every string up to SHARED_LENGTH, interned."""
    if type(value) is dict:
        return {sys.intern(k): shared(v) for k, v in value.items()}
    if type(value) is list:
        return [shared(v) for v in value]
    if type(value) is str and len(value) <= SHARED_LENGTH:
        return sys.intern(value)
    return value


def is_news(previous: Obj | None, obj: Obj) -> bool:
    """True unless `obj` is what was kept before but for its resourceVersion."""
    if previous is None or previous.keys() != obj.keys():
        return True
    if any(previous[k] != obj[k] for k in obj if k != "metadata"):
        return True
    before, after = previous.get("metadata") or {}, obj.get("metadata") or {}
    return before.keys() != after.keys() or any(
        before[k] != after[k] for k in after if k != "resourceVersion"
    )


def _without_managed_fields(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _picked(obj: Any, keys: tuple[str, ...]) -> Obj:
    return {k: obj[k] for k in keys if k in obj} if isinstance(obj, dict) else {}


def _head(obj: Obj) -> Obj:
    head = _picked(obj, ("apiVersion", "kind"))
    head["metadata"] = _picked(obj.get("metadata"), CHILD_METADATA)
    return head


def _pod(obj: Obj) -> Obj:
    status = obj.get("status") or {}
    kept_status = _picked(status, ("phase",))
    ended = [
        {"name": c.get("name"), "state": {"terminated": terminated}}
        for c in status.get("containerStatuses") or []
        if isinstance(c, dict) and (terminated := (c.get("state") or {}).get("terminated"))
    ]
    if ended:
        kept_status["containerStatuses"] = ended
    return {**_head(obj), "status": kept_status}


def _job(obj: Obj) -> Obj:
    status = _picked(obj.get("status"), JOB_STATUS)
    if isinstance(status.get("conditions"), list):
        status["conditions"] = [_picked(c, JOB_CONDITION) for c in status["conditions"]]
    return {**_head(obj), "spec": _picked(obj.get("spec"), JOB_SPEC), "status": status}


def _workload(obj: Obj) -> Obj:
    # What controller/core/kueue/workload.py reads: active, the conditions, the ClusterQueue.
    status = obj.get("status") or {}
    kept_status: Obj = {}
    if isinstance(status.get("conditions"), list):
        kept_status["conditions"] = [_picked(c, JOB_CONDITION) for c in status["conditions"]]
    if cluster_queue := (status.get("admission") or {}).get("clusterQueue"):
        kept_status["admission"] = {"clusterQueue": cluster_queue}
    return {**_head(obj), "spec": _picked(obj.get("spec"), ("active",)), "status": kept_status}


PROJECTIONS: dict[str, Callable[[Obj], Obj]] = {"Pod": _pod, "Job": _job, "Workload": _workload}
