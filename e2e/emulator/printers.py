"""Server-side printing of built-in kinds, so `kubectl get pods/jobs/cronjobs` reads as usual.

The real server's table convertors (pkg/printers/internalversion) pick the
columns; these are the common ones, computed from the stored object.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .clock import parse_time

Obj = dict[str, Any]
Cell = Callable[[Obj, datetime], Any]


def age(created: str | None, now: datetime) -> str:
    """duration.HumanDuration, as kubectl prints AGE."""
    if not created:
        return "<unknown>"
    secs = int((now - parse_time(created)).total_seconds())
    if secs < 0:
        return "<invalid>"
    if secs < 120:
        return f"{secs}s"
    mins = secs // 60
    if mins < 10:
        return f"{mins}m{secs % 60}s" if secs % 60 else f"{mins}m"
    if mins < 180:
        return f"{mins}m"
    hours = mins // 60
    if hours < 8:
        return f"{hours}h{mins % 60}m" if mins % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    return f"{days}d" if days < 730 else f"{days // 365}y"


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def _pod_ready(pod: Obj, _now: datetime) -> str:
    statuses = _status(pod).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _pod_status(pod: Obj, _now: datetime) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for cs in _status(pod).get("containerStatuses") or []:
        state = cs.get("state") or {}
        for kind in ("waiting", "terminated"):
            if state.get(kind, {}).get("reason"):
                return str(state[kind]["reason"])
    return str(_status(pod).get("phase", "Pending"))


def _job_status(job: Obj, _now: datetime) -> str:
    conds = {c["type"]: c["status"] for c in _status(job).get("conditions") or []}
    for name in ("Complete", "Failed", "Suspended"):
        if conds.get(name) == "True":
            return name
    return "Running"


def _job_completions(job: Obj, _now: datetime) -> str:
    want = (job.get("spec") or {}).get("completions")
    return f"{_status(job).get('succeeded', 0)}/{want if want is not None else 1}"


def _job_duration(job: Obj, now: datetime) -> str:
    start = _status(job).get("startTime")
    if not start:
        return ""
    end = _status(job).get("completionTime")
    return age(start, parse_time(end) if end else now)


def _field(*path: str, default: Any = None) -> Cell:
    def cell(obj: Obj, _now: datetime) -> Any:
        cur: Any = obj
        for part in path:
            cur = cur.get(part) if isinstance(cur, dict) else None
        return default if cur is None else cur

    return cell


def _count(*path: str) -> Cell:
    return lambda obj, now: len(_field(*path, default={})(obj, now))


def _since(*path: str, default: str = "<none>") -> Cell:
    return lambda obj, now: age(v, now) if (v := _field(*path)(obj, now)) else default


COLUMNS: dict[tuple[str, str], list[tuple[str, Cell]]] = {
    ("", "pods"): [("Ready", _pod_ready), ("Status", _pod_status), ("Restarts", lambda o, n: 0)],
    ("batch", "jobs"): [("Status", _job_status), ("Completions", _job_completions),
                        ("Duration", _job_duration)],
    ("batch", "cronjobs"): [
        ("Schedule", _field("spec", "schedule")),
        ("Timezone", _field("spec", "timeZone", default="<none>")),
        ("Suspend", _field("spec", "suspend", default=False)),
        ("Active", _count("status", "active")),
        ("Last Schedule", _since("status", "lastScheduleTime")),
    ],
    ("", "namespaces"): [("Status", _field("status", "phase"))],
    ("", "configmaps"): [("Data", lambda o, n: len(o.get("data") or {}) + len(o.get("binaryData") or {}))],  # noqa: E501
    ("", "secrets"): [("Type", _field("type")), ("Data", _count("data"))],
    ("", "serviceaccounts"): [("Secrets", _count("secrets"))],
    ("coordination.k8s.io", "leases"): [("Holder", _field("spec", "holderIdentity", default=""))],
}  # fmt: skip
