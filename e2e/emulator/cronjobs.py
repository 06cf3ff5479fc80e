"""The CronJob controller, on the emulator's clock.

Follows kube-controller-manager's cronjob_controllerv2: the most recent
unmet schedule time since `lastScheduleTime` (or creation, bounded by
`startingDeadlineSeconds`) is started once; Job names are
`<cronjob>-<minutes since epoch>` so a crash cannot start a schedule twice;
Forbid skips while a Job is active, Replace deletes active Jobs first; finished
Jobs beyond the history limits are deleted oldest first.
"""

from __future__ import annotations

import copy
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from croniter import croniter

from .api import Api
from .clock import parse_time, rfc3339
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
        status = copy.deepcopy(cj.get("status") or {})
        jobs = self._owned_jobs(cj)
        self._sync_active(cj, status, jobs)
        if not cj["metadata"].get("deletionTimestamp") and not cj["spec"].get("suspend"):
            self._maybe_start(cj, status)
            self._cleanup_history(cj, jobs)
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
        """status.active = owned unfinished Jobs; note the latest successful finish."""
        active = []
        known = {r["uid"]: r for r in status.get("active") or []}
        for job in jobs:
            state = is_finished(job)
            if state is None and not job["metadata"].get("deletionTimestamp"):
                # References keep the resourceVersion they were created with.
                active.append(known.get(job["metadata"]["uid"]) or _ref(job))
            if state and job["metadata"]["uid"] in known:
                msg = f"Saw completed job: {job['metadata']['name']}, status: {state}"
                self._event(cj, "SawCompletedJob", msg)
            if state == "Complete":
                done = (job.get("status") or {}).get("completionTime")
                if done and done > status.get("lastSuccessfulTime", ""):
                    status["lastSuccessfulTime"] = done
        active.sort(key=lambda r: r["name"])
        if active:
            status["active"] = active
        else:
            status.pop("active", None)

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
                self._delete_job(cj["metadata"]["namespace"], ref["name"])
            status.pop("active", None)
        job = self._create_job(cj, name, scheduled)
        if job is not None:
            status.setdefault("active", []).append(_ref(job))
        status["lastScheduleTime"] = rfc3339(scheduled)

    def _create_job(self, cj: Obj, name: str, scheduled: datetime) -> Obj | None:
        meta = cj["metadata"]
        template = copy.deepcopy(cj["spec"].get("jobTemplate") or {})
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
            created = self.api.create(self.jobs, meta["namespace"], job)
            self._event(cj, "SuccessfulCreate", f"Created job {name}")
            return created
        except Exception as exc:
            if getattr(exc, "reason", "") == "AlreadyExists":
                return self.api.store.get("jobs.batch", meta["namespace"], name)
            raise

    def _cleanup_history(self, cj: Obj, jobs: list[Obj]) -> None:
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
            done.sort(
                key=lambda j: (
                    (j.get("status") or {}).get("startTime") or j["metadata"]["creationTimestamp"]
                )
            )
            for job in done[: max(len(done) - limit, 0)]:
                self._delete_job(job["metadata"]["namespace"], job["metadata"]["name"])
                self._event(cj, "SuccessfulDelete", f"Deleted job {job['metadata']['name']}")

    def _event(self, cj: Obj, reason: str, message: str) -> None:
        record(
            self.api,
            cj,
            type_="Normal",
            reason=reason,
            message=message,
            component="cronjob-controller",
        )

    def _delete_job(self, ns: str, name: str) -> None:
        assert self.jobs is not None
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
