"""Kueue's Workloads in the run adapter: watched once Kueue's API is served, matched to Jobs.

Kueue makes one Workload per Job it manages (controller/core/kueue/workload.py), with the
Job as its controller owner and no label of ours. So the informer lists every Workload of
the watched namespaces (kept small: kept.py keeps only what the core reads), and this index
matches each to the Job that owns it. Keyed by the Job, it finds a run's Workload whichever
of the two reached the caches first; the event of a Workload wakes the run of its Job.

Kueue may be installed after the controller starts: like cert-manager for the serving
adapter, its API is looked for at start and on every resync (`serves_workloads`), and the
informers start the first time it is there. Without Kueue nothing is watched, and nothing
changes for runs.
"""

from __future__ import annotations

import threading

from controller.core.ports import ApiError, Obj
from controller.core.routing import object_key
from controller.kube.transport import PATHS, Transport


def owner_job(workload: Obj) -> str | None:
    """`namespace/name` of the Job that controls `workload`, if a Job does."""
    meta = workload.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and ref.get("name"):
            return f"{meta.get('namespace', '')}/{ref['name']}"
    return None


class WorkloadIndex:
    """Job key -> the key of the Workload it owns; kept by the Workload informer's events."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[str, str] = {}

    def set(self, workload: Obj, *, present: bool) -> str | None:
        """Record (or forget) a Workload; the key of its Job, if a Job owns it."""
        job = owner_job(workload)
        if job is None:
            return None
        key = object_key(workload)
        with self._lock:
            if present:
                self._by_job[job] = key
            elif self._by_job.get(job) == key:
                del self._by_job[job]
        return job

    def of_job(self, job_key: str) -> str | None:
        """The key of the Workload the Job owns, if one was seen."""
        with self._lock:
            return self._by_job.get(job_key)


def serves_workloads(transport: Transport) -> bool:
    """True when the API server serves Kueue's Workloads (its CRDs are installed)."""
    prefix, plural = PATHS["Workload"]
    try:
        found = transport.request("GET", prefix)
    except ApiError as exc:
        if exc.is_not_found:
            return False
        raise
    return any(r.get("name") == plural for r in (found or {}).get("resources") or [])
