"""The CronJob controller, on the emulator's clock.

Follows kube-controller-manager's cronjob_controllerv2: the most recent
unmet schedule time since `lastScheduleTime` (or creation, bounded by
`startingDeadlineSeconds`) is started once; Job names are
`<cronjob>-<minutes since epoch>` so a crash cannot start a schedule twice;
Forbid skips while a Job is active, Replace deletes active Jobs first; finished
Jobs beyond the history limits are deleted oldest first.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from .api import Api
from .clock import parse_time, rfc3339
from .codec import clone
from .jobpods import is_finished
from .manager import Manager
from .options import DeleteOptions
from .patch import MERGE_PATCH
from .recorder import record
from .store import Event

Obj = dict[str, Any]
SCHEDULED_AT = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def most_recent_schedule(cj: Obj, now: datetime) -> datetime | None:
    """The latest schedule time t with earliest < t <= now, or None."""
    spec = cj["spec"]
    tz = zoneinfo.ZoneInfo(spec.get("timeZone") or "UTC")
    status = cj.get("status") or {}
    earliest = parse_time(status.get("lastScheduleTime") or cj["metadata"]["creationTimestamp"])
    deadline = spec.get("startingDeadlineSeconds")
    if deadline is not None:
        earliest = max(earliest, now - timedelta(seconds=deadline))
    # croniter is exclusive of its start; start just after `now` (second precision).
    start = now.astimezone(tz).replace(microsecond=0) + timedelta(seconds=1)
    prev: datetime = croniter(spec["schedule"], start).get_prev(datetime)
    prev = prev.astimezone(UTC)
    return prev if prev > earliest else None


def next_schedule(cj: Obj, now: datetime) -> datetime:
    tz = zoneinfo.ZoneInfo(cj["spec"].get("timeZone") or "UTC")
    nxt: datetime = croniter(cj["spec"]["schedule"], now.astimezone(tz)).get_next(datetime)
    return nxt.astimezone(UTC)


class CronJobController:
    """Reconciles batch/v1 CronJobs."""

    name = "cronjob"

    def __init__(self, api: Api, *, manager: Manager) -> None:
        self.api = api
        self.manager = manager
        self.cronjobs = api.registry.get("batch", "v1", "cronjobs")
        self.jobs = api.registry.get("batch", "v1", "jobs")

    def keys_for(self, event: Event) -> list[str]:
        meta = event.obj["metadata"]
        if event.key == "cronjobs.batch" and event.type != "DELETED":
            return [f"{meta['namespace']}/{meta['name']}"]
        if event.key == "jobs.batch":
            return [
                f"{meta['namespace']}/{ref['name']}"
                for ref in meta.get("ownerReferences") or []
                if ref.get("kind") == "CronJob" and ref.get("controller")
            ]
        return []

    def reconcile(self, key: str) -> None:
        ns, _, name = key.partition("/")
        cj = self.api.store.get("cronjobs.batch", ns, name)
        if cj is None:
            return
        status = clone(cj.get("status") or {})
        jobs = self._owned_jobs(cj)
        # sync(): history cleanup comes first, every pass, even suspended or deleting.
        self._cleanup_history(cj, status, jobs)
        self._sync_active(cj, status, jobs)
        if not cj["metadata"].get("deletionTimestamp") and not cj["spec"].get("suspend"):
            self._maybe_start(cj, status)
        self._write_status(cj, status)

    def _owned_jobs(self, cj: Obj) -> list[Obj]:
        uid = cj["metadata"]["uid"]
        return [
            obj
            for key, obj in self.api.store.dependents(uid)
            if key == "jobs.batch"
            and any(
                r.get("uid") == uid and r.get("controller")
                for r in obj["metadata"]["ownerReferences"]
            )
        ]

    def _sync_active(self, cj: Obj, status: Obj, jobs: list[Obj]) -> None:
        """syncCronJob's bookkeeping: status.active lists only Jobs this controller started.

        A finished active Job leaves the list; an unfinished Job it did not start is
        reported (UnexpectedJob), not adopted; a vanished one is dropped (MissingJob).
        """
        active = list(status.get("active") or [])
        for job in jobs:
            meta, state = job["metadata"], is_finished(job)
            known = any(r["uid"] == meta["uid"] for r in active)
            if not known and state is None:
                msg = f"Saw a job that the controller did not create or forgot: {meta['name']}"
                self._event(cj, "UnexpectedJob", msg, warning=True)
            elif known and state:
                active = [r for r in active if r["uid"] != meta["uid"]]
                self._event(
                    cj, "SawCompletedJob", f"Saw completed job: {meta['name']}, status: {state}"
                )
            elif state == "Complete":
                done = (job.get("status") or {}).get("completionTime")
                if done and done > status.get("lastSuccessfulTime", ""):
                    status["lastSuccessfulTime"] = done
        for ref in [r for r in active if not self._exists(r)]:
            self._event(cj, "MissingJob", f"Active job went missing: {ref['name']}")
            active.remove(ref)
        if active:
            status["active"] = active
        else:
            status.pop("active", None)

    def _exists(self, ref: Obj) -> bool:
        return self.api.store.get("jobs.batch", ref["namespace"], ref["name"]) is not None

    def _maybe_start(self, cj: Obj, status: Obj) -> None:
        now = self.api.clock.now()
        key = f"{cj['metadata']['namespace']}/{cj['metadata']['name']}"
        self.manager.enqueue_at(next_schedule(cj, now), self.name, key)
        scheduled = most_recent_schedule({**cj, "status": status}, now)
        if scheduled is None:
            return
        name = f"{cj['metadata']['name']}-{int(scheduled.timestamp() // 60)}"
        if any(r["name"] == name for r in status.get("active", [])):
            return
        policy = cj["spec"].get("concurrencyPolicy", "Allow")
        if policy == "Forbid" and status.get("active"):
            return
        if policy == "Replace":
            for ref in status.get("active", []):
                self._delete_job(cj, ref["name"])
            status.pop("active", None)
        job = self._create_job(cj, name, scheduled)
        if job is None:
            return
        status.setdefault("active", []).append(_ref(job))
        status["lastScheduleTime"] = rfc3339(scheduled)

    def _create_job(self, cj: Obj, name: str, scheduled: datetime) -> Obj | None:
        meta = cj["metadata"]
        template = clone(cj["spec"].get("jobTemplate") or {})
        tmeta = template.get("metadata") or {}
        tz = zoneinfo.ZoneInfo(cj["spec"].get("timeZone") or "UTC")
        local = scheduled.astimezone(tz)
        stamp = local.strftime("%Y-%m-%dT%H:%M:%S") + (
            "Z"
            if local.utcoffset() == timedelta(0)
            else local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:]
        )
        job = {
            "metadata": {
                "name": name,
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": {**(tmeta.get("annotations") or {}), SCHEDULED_AT: stamp},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "CronJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template.get("spec") or {},
        }
        assert self.jobs is not None
        try:
            created = self.api.create(self.jobs, meta["namespace"], job, owned=True)
        except Exception as exc:
            if getattr(exc, "reason", "") == "AlreadyExists":
                return self._existing_job(cj, name)
            raise
        self._event(cj, "SuccessfulCreate", f"Created job {name}")
        return created

    def _existing_job(self, cj: Obj, name: str) -> Obj | None:
        """The name is the lock: a Job this CronJob controls was started by us and then
        forgotten, so it is listed again; anyone else's Job means "handled", not adopted."""
        job = self.api.store.get("jobs.batch", cj["metadata"]["namespace"], name)
        if job is None:
            return None
        uid = cj["metadata"]["uid"]
        refs = job["metadata"].get("ownerReferences") or []
        return job if any(r.get("controller") and r.get("uid") == uid for r in refs) else None

    def _cleanup_history(self, cj: Obj, status: Obj, jobs: list[Obj]) -> None:
        """Delete finished Jobs beyond the history limits, earliest started first."""
        spec = cj["spec"]
        for state, limit in (
            ("Complete", spec.get("successfulJobsHistoryLimit", 3)),
            ("Failed", spec.get("failedJobsHistoryLimit", 1)),
        ):
            done = [
                j
                for j in jobs
                if is_finished(j) == state and not j["metadata"].get("deletionTimestamp")
            ]
            done.sort(key=_start_order)
            for job in done[: max(len(done) - limit, 0)]:
                meta = job["metadata"]
                self._delete_job(cj, meta["name"])
                status["active"] = [
                    r for r in status.get("active") or [] if r["uid"] != meta["uid"]
                ]
                self._event(cj, "SuccessfulDelete", f"Deleted job {meta['name']}")

    def _event(self, cj: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        record(
            self.api,
            cj,
            type_="Warning" if warning else "Normal",
            reason=reason,
            message=message,
            component="cronjob-controller",
        )

    def _delete_job(self, cj: Obj, name: str) -> None:
        assert self.jobs is not None
        ns = cj["metadata"]["namespace"]
        try:
            self.api.delete(self.jobs, ns, name, DeleteOptions(propagation="Background"))
        except Exception as exc:
            if getattr(exc, "code", None) != 404:
                raise

    def _write_status(self, cj: Obj, status: Obj) -> None:
        if status == (cj.get("status") or {}):
            return
        assert self.cronjobs is not None
        full = {**status}
        for field in ("active", "lastScheduleTime", "lastSuccessfulTime"):
            full.setdefault(field, None)
        body = {"metadata": {"uid": cj["metadata"]["uid"]}, "status": full}
        self.api.patch(
            self.cronjobs,
            cj["metadata"]["namespace"],
            cj["metadata"]["name"],
            body,
            content_type=MERGE_PATCH,
            subresource="status",
        )


def _ref(job: Obj) -> Obj:
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "resourceVersion": meta["resourceVersion"],
    }


def _start_order(job: Obj) -> tuple[bool, str, str]:
    """byJobStartTime: by status.startTime, Jobs never started last, ties by name."""
    start = (job.get("status") or {}).get("startTime")
    return (start is None, start or "", job["metadata"]["name"])
