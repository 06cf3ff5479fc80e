"""The Job controller (and TTL-after-finished), following kube-controller-manager.

Pods are created from the template with the Job's labels, a controller owner
reference and the `batch.kubernetes.io/job-tracking` finalizer; terminal pods are
counted into `status.succeeded/failed` and only then released, which is how the
real controller avoids losing or double-counting pods. Failure handling follows
1.31+: podFailurePolicy, backoffLimit and activeDeadlineSeconds first add a
`FailureTarget` condition, active pods are terminated, then `Failed` is added;
success adds `SuccessCriteriaMet` then `Complete`. Failed pods are kept. Indexed Jobs with
`backoffLimitPerIndex` back off and fail per index (jobindexes.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .api import Api
from .clock import parse_time, rfc3339
from .codec import clone
from .errors import ApiError
from .jobindexes import (
    Held,
    due_indexes,
    has_backoff_per_index,
    index_state,
    index_verdict,
    replacement_annotations,
)
from .jobpods import (
    completion_index,
    condition,
    format_indexes,
    is_finished,
    parse_indexes,
    phase,
    pod_body,
    pod_failure_action,
    ready,
    terminal,
)
from .manager import Manager
from .options import DeleteOptions
from .patch import MERGE_PATCH
from .recorder import record
from .store import Event

Obj = dict[str, Any]
TRACKING = "batch.kubernetes.io/job-tracking"
# Seconds (emulator clock) before a pod creation refused by admission is tried again.
FAILED_CREATE_RETRY = 10.0


class JobController:
    """Reconciles batch/v1 Jobs."""

    name = "job"

    def __init__(self, api: Api, *, manager: Manager, backoff_seconds: float = 10.0) -> None:
        self.backoff_seconds = backoff_seconds
        # job uid -> (failures since the last success, time of the last failure)
        self._backoff: dict[str, tuple[int, datetime]] = {}
        self.api = api
        self.manager = manager
        self._counted: dict[str, set[str]] = {}
        self.jobs = api.registry.get("batch", "v1", "jobs")
        self.pods = api.registry.get("", "v1", "pods")

    def keys_for(self, event: Event) -> list[str]:
        meta = event.obj["metadata"]
        if event.key == "jobs.batch" and event.type != "DELETED":
            return [f"{meta['namespace']}/{meta['name']}"]
        if event.key == "pods":
            keys = [
                f"{meta['namespace']}/{ref['name']}"
                for ref in meta.get("ownerReferences") or []
                if ref.get("kind") == "Job" and ref.get("controller")
            ]
            if event.type != "DELETED" and TRACKING in (meta.get("finalizers") or []):
                keys.append(f"orphan:{meta['namespace']}/{meta['name']}")
            return keys
        return []

    def now(self) -> str:
        return rfc3339(self.api.clock.now())

    # -- reconcile -------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if key.startswith("orphan:"):
            self._release_orphan(key.removeprefix("orphan:"))
            return
        ns, _, name = key.partition("/")
        job = self.api.store.get("jobs.batch", ns, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        pods = self._pods(job)
        status = clone(job.get("status") or {})
        active = [p for p in pods if not terminal(p) and not p["metadata"].get("deletionTimestamp")]
        held = index_state(job, pods, status, active, tracking=TRACKING)
        counted = self._countterminal(job, pods, status, held)
        if is_finished(job):
            self._release(counted)
            self._ttl(job)
            return
        self._suspend_or_start(job, status, active)
        if not job["spec"].get("suspend"):
            self._progress(job, status, pods, active, held)
        self._write_status(job, status, pods)
        self._release(counted)

    def _release_orphan(self, key: str) -> None:
        """Pods whose Job is gone must not keep the tracking finalizer forever."""
        ns, _, name = key.partition("/")
        pod = self.api.store.get("pods", ns, name)
        if pod is None:
            return
        for ref in pod["metadata"].get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "Job":
                job = self.api.store.by_uid(ref.get("uid", ""))
                if job is not None and not job["metadata"].get("deletionTimestamp"):
                    return
        self._release([pod])

    def _pods(self, job: Obj) -> list[Obj]:
        uid = job["metadata"]["uid"]
        return [
            obj
            for key, obj in self.api.store.dependents(uid)
            if key == "pods"
            and any(
                r.get("uid") == uid and r.get("controller")
                for r in obj["metadata"]["ownerReferences"]
            )
        ]

    def _countterminal(self, job: Obj, pods: list[Obj], status: Obj, held: Held) -> list[Obj]:
        """Fold newly terminal pods into the counters; returns pods to release."""
        waiting = {p["metadata"]["uid"] for p in held.values()}
        seen = self._counted.setdefault(job["metadata"]["uid"], set())
        release = []
        indexes = parse_indexes(status.get("completedIndexes", ""))
        for pod in pods:
            if TRACKING not in (pod["metadata"].get("finalizers") or []):
                continue
            if not terminal(pod):
                continue
            if pod["metadata"]["uid"] in waiting and pod_failure_action(job, pod)[0] != "FailJob":
                continue
            release.append(pod)
            if pod["metadata"]["uid"] in seen:
                continue
            seen.add(pod["metadata"]["uid"])
            if phase(pod) == "Succeeded":
                self._backoff.pop(job["metadata"]["uid"], None)
                status["succeeded"] = status.get("succeeded", 0) + 1
                idx = completion_index(pod)
                if idx is not None:
                    indexes.add(idx)
            else:
                self._count_failure(job, pod, status)
        if job["spec"].get("completionMode") == "Indexed":
            status["completedIndexes"] = format_indexes(indexes)  # omitempty: "" is dropped
        return release

    def _count_failure(self, job: Obj, pod: Obj, status: Obj) -> None:
        action, message = pod_failure_action(job, pod)
        if action == "Ignore":
            return
        status["failed"] = status.get("failed", 0) + 1
        count, _ = self._backoff.get(job["metadata"]["uid"], (0, self.api.clock.now()))
        self._backoff[job["metadata"]["uid"]] = (count + 1, self.api.clock.now())
        if action == "FailJob" and not condition({"status": status}, "FailureTarget"):
            self._set_condition(status, "FailureTarget", "PodFailurePolicy", message)

    def _release(self, pods: list[Obj]) -> None:
        for pod in pods:
            fins = [f for f in pod["metadata"].get("finalizers") or [] if f != TRACKING]
            patch = {"metadata": {"finalizers": fins or None, "uid": pod["metadata"]["uid"]}}
            assert self.pods is not None
            try:
                self.api.patch(
                    self.pods,
                    pod["metadata"]["namespace"],
                    pod["metadata"]["name"],
                    patch,
                    content_type=MERGE_PATCH,
                )
            except Exception as exc:
                if getattr(exc, "code", None) not in (404, 422):
                    raise

    # -- suspend / failure / success / scale -------------------------------------------
    def _suspend_or_start(self, job: Obj, status: Obj, active: list[Obj]) -> None:
        suspended = condition({"status": status}, "Suspended")
        if job["spec"].get("suspend"):
            for pod in active:
                self._delete_pod(pod)
            if not suspended or suspended["status"] != "True":
                self._set_condition(status, "Suspended", "JobSuspended", "Job suspended")
                self._event(job, "Suspended", "Job suspended")
            return
        if suspended and suspended["status"] == "True":
            self._set_condition(status, "Suspended", "JobResumed", "Job resumed", value="False")
            status["startTime"] = self.now()
            self._event(job, "Resumed", "Job resumed")
        status.setdefault("startTime", self.now())

    def _progress(
        self, job: Obj, status: Obj, pods: list[Obj], active: list[Obj], held: Held
    ) -> None:
        spec = job["spec"]
        target = condition({"status": status}, "FailureTarget")
        if not target:
            target = self._check_limits(job, status)
        if target:
            for pod in active:
                self._delete_pod(pod)
            if not held and not any(not terminal(p) for p in pods):  # held: counted first
                self._set_condition(status, "Failed", target["reason"], target["message"])
                self._event(job, target["reason"], target["message"], warning=True)
            return
        if self._succeeded(spec, status, active):
            if not condition({"status": status}, "SuccessCriteriaMet"):
                self._set_condition(
                    status,
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
            for pod in active:
                self._delete_pod(pod)
            if not any(not terminal(p) for p in pods):
                self._set_condition(
                    status,
                    "Complete",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                )
                status["completionTime"] = self.now()
                self._event(job, "Completed", "Job completed")
            return
        self._scale(job, status, active, held)

    def _check_limits(self, job: Obj, status: Obj) -> Obj | None:
        spec = job["spec"]
        if status.get("failed", 0) > spec.get("backoffLimit", 6):
            self._set_condition(
                status,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
        elif spec.get("activeDeadlineSeconds") is not None and status.get("startTime"):
            deadline = parse_time(status["startTime"]) + timedelta(
                seconds=spec["activeDeadlineSeconds"]
            )
            if self.api.clock.now() >= deadline:
                self._set_condition(
                    status,
                    "FailureTarget",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                )
            else:
                key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
                self.manager.enqueue_at(deadline, self.name, key)
        verdict = index_verdict(job, status)
        if verdict and not condition({"status": status}, "FailureTarget"):
            self._set_condition(status, "FailureTarget", *verdict)
        return condition({"status": status}, "FailureTarget")

    def _succeeded(self, spec: Obj, status: Obj, active: list[Obj]) -> bool:
        done = status.get("succeeded", 0)
        if spec.get("completionMode") == "Indexed":
            return len(parse_indexes(status.get("completedIndexes", ""))) >= int(
                spec["completions"]
            )
        if spec.get("completions") is None:
            return done >= 1 and not active
        return bool(done >= spec["completions"])

    def _backing_off(self, job: Obj) -> bool:
        """Failed pods are replaced after 10s, 20s, 40s... (capped at 6 min), on the clock."""
        failures, last = self._backoff.get(job["metadata"]["uid"], (0, self.api.clock.now()))
        if not failures or not self.backoff_seconds or has_backoff_per_index(job):
            return False
        delay = min(self.backoff_seconds * 2 ** (failures - 1), 360.0)
        ready_at = last + timedelta(seconds=delay)
        if self.api.clock.now() >= ready_at:
            return False
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        self.manager.enqueue_at(ready_at, self.name, key)
        return True

    def _scale(self, job: Obj, status: Obj, active: list[Obj], held: Held) -> None:
        spec = job["spec"]
        if self._backing_off(job):
            return
        room = spec.get("parallelism", 1) - len(active)
        if spec.get("completionMode") == "Indexed":
            busy = {completion_index(p) for p in active}
            skip = parse_indexes(status.get("completedIndexes", "")) | busy
            skip |= parse_indexes(status.get("failedIndexes") or "")
            todo = [i for i in range(spec["completions"]) if i not in skip][: max(room, 0)]
            due, wake = due_indexes(todo, held, self.backoff_seconds, self.api.clock.now())
            if wake is not None:
                key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
                self.manager.enqueue_at(wake, self.name, key)
            for idx in due:
                extra = replacement_annotations(job, held.get(idx))
                if not self._create_pod(job, idx, extra):
                    return  # refused: the rest of the batch waits (slowStartBatch)
            return
        if spec.get("completions") is None:
            want = room if status.get("succeeded", 0) == 0 else 0
        else:
            want = min(room, spec["completions"] - status.get("succeeded", 0) - len(active))
        for _ in range(max(want, 0)):
            if not self._create_pod(job, None):
                return

    # -- writes ------------------------------------------------------------------------
    def _create_pod(self, job: Obj, index: int | None, extra: dict[str, str] | None = None) -> bool:
        """Create one pod; False when admission refused it (FailedCreate, retried later)."""
        meta = job["metadata"]
        body = pod_body(job, index, extra, tracking=TRACKING)  # built from a clone: ours
        assert self.pods is not None
        try:
            pod = self.api.create(self.pods, meta["namespace"], body, owned=True)
        except ApiError as exc:
            if exc.code != 403:  # admission (PodSecurity, a terminating namespace): no retry storm
                raise
            self._event(job, "FailedCreate", f"Error creating: {exc.message}", warning=True)
            self.manager.enqueue_after(
                FAILED_CREATE_RETRY, self.name, f"{meta['namespace']}/{meta['name']}"
            )
            return False
        self._event(job, "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}")
        return True

    def _delete_pod(self, pod: Obj) -> None:
        assert self.pods is not None
        meta = pod["metadata"]
        try:
            self.api.delete(
                self.pods, meta["namespace"], meta["name"], DeleteOptions(propagation="Background")
            )
        except Exception as exc:
            if getattr(exc, "code", None) != 404:
                raise

    def _event(self, job: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        kind = "Warning" if warning else "Normal"
        record(
            self.api, job, type_=kind, reason=reason, message=message, component="job-controller"
        )

    def _set_condition(
        self, status: Obj, type_: str, reason: str, message: str, *, value: str = "True"
    ) -> None:
        now = self.now()
        conds = [c for c in status.get("conditions") or [] if c["type"] != type_]
        conds.append(
            {
                "type": type_,
                "status": value,
                "lastProbeTime": now,
                "lastTransitionTime": now,
                "reason": reason,
                "message": message,
            }
        )
        status["conditions"] = conds

    def _write_status(self, job: Obj, status: Obj, pods: list[Obj]) -> None:
        live = [p for p in pods if not terminal(p)]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        for field, value in (("active", len(active)),):
            if value:
                status[field] = value
            else:
                status.pop(field, None)
        status["ready"] = sum(1 for p in active if ready(p))
        status["terminating"] = len(live) - len(active)
        status.setdefault("uncountedTerminatedPods", {})
        for field in ("succeeded", "failed", "completedIndexes"):
            if not status.get(field):
                status.pop(field, None)
        if status == (job.get("status") or {}):
            return
        assert self.jobs is not None
        # Merge patch: fields that went away must be sent as null.
        gone = {k: None for k in job.get("status") or {} if k not in status}
        body = {"metadata": {"uid": job["metadata"]["uid"]}, "status": {**gone, **status}}
        self.api.patch(
            self.jobs,
            job["metadata"]["namespace"],
            job["metadata"]["name"],
            body,
            content_type=MERGE_PATCH,
            subresource="status",
            owned=True,  # `status` is this reconcile's clone, not used after this
        )

    def _ttl(self, job: Obj) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        status = job.get("status") or {}
        finished = status.get("completionTime") or next(
            (
                c["lastTransitionTime"]
                for c in status.get("conditions") or []
                if c["type"] == "Failed"
            ),
            None,
        )
        if not finished:
            return
        expiry = parse_time(finished) + timedelta(seconds=ttl)
        meta = job["metadata"]
        if self.api.clock.now() < expiry:
            self.manager.enqueue_at(expiry, self.name, f"{meta['namespace']}/{meta['name']}")
            return
        assert self.jobs is not None
        opts = DeleteOptions(propagation="Foreground", precondition_uid=meta["uid"])
        self.api.delete(self.jobs, meta["namespace"], meta["name"], opts)
