"""Live progress: whose log to read, and the counts `status.progress` shows. Pure.

How the numbers travel, and why: the runner pod holds no API credentials (its
ServiceAccount token is never mounted), so it cannot write the run's status. It prints
one short JSON line, `{"longrunProgress": {...}}`, every `progressIntervalSeconds`;
the controller reads the tail of the running pod's log through the `pods/log`
subresource (`get`, read-only: one verb in the chart's Role), `TAIL_LINES` lines and
at most `LIMIT_BYTES`. The cost is bounded by the rules here:
- only the pod of a Job that is running is read (no read for any other run); of a run over
  several pods, the running pod of each index, and their counts add up (`shards`);
- only when the run's progress is older than the interval (`PROGRESS_INTERVAL`, or the
  runner's own interval when that is longer), so at most one read and one status patch
  per running run per interval; the reconciler looks again after the interval.

What the log says is user-controlled text: only a line that parses as a
`ProgressReport` counts, and the numbers are bounded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError

from contracts.run import PROGRESS_KEY, InferenceRunStatus, ProgressReport, RunProgress
from controller.core import names
from controller.core.jobs import Obj, job_indexes, job_state, pod_job_name, runner_exits
from controller.core.settings import Settings
from controller.core.shards import (
    Share,
    eta_of,
    pod_index,
    share_of_report,
    share_of_result,
    summed_shares,
)
from controller.core.status import FINISHED, Observed, RunnerLog

TAIL_LINES = 20  # the runner's other lines (warnings) between two reports
LIMIT_BYTES = 16 * 1024  # applies to the tail from its first line: keep lines x bytes above it
MARKER = '{"' + PROGRESS_KEY + '"'
RUNNER_INTERVAL_KEY = "progressIntervalSeconds"


@dataclass(frozen=True)
class LogTarget:
    """A pod whose log to read this pass (`index`: its completion index, in a run over several
    pods)."""

    namespace: str
    pod: str
    job_name: str
    container: str = names.CONTAINER_NAME
    index: int | None = None


def interval_of(obs: Observed, settings: Settings) -> float:
    """Seconds between two refreshes: the runner's `progressIntervalSeconds` from the run's
    contract, never less than PROGRESS_INTERVAL (also the default when the contract is silent)."""
    text = ((obs.config_map or {}).get("data") or {}).get(names.CONTRACT_KEY)
    try:
        runner = json.loads(str(text))["runner"]
        seconds = float(runner[RUNNER_INTERVAL_KEY])
    except (TypeError, ValueError, KeyError):
        seconds = 0.0
    return max(settings.progress_interval, seconds)


def running_job(obs: Observed) -> Obj | None:
    """The Job whose progress the run shows: a one-shot run's Job while it runs; a scheduled
    run's newest running execution."""
    if not obs.spec.is_scheduled:
        return obs.job if obs.job is not None and job_state(obs.job).phase == "Running" else None
    running = [job for job in obs.jobs if job_state(job).phase == "Running"]
    return max(running, key=_created, default=None)


def _created(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def running_pods(pods: Sequence[Obj], job_name: str) -> dict[int | None, Obj]:
    """The Job's newest pod that runs (not being deleted), of each completion index (one,
    None, when the Job is not Indexed)."""
    newest: dict[int | None, Obj] = {}
    for pod in _running(pods, job_name):
        index = pod_index(pod)
        if index not in newest or _created(pod) > _created(newest[index]):
            newest[index] = pod
    return newest


def _running(pods: Sequence[Obj], job_name: str) -> list[Obj]:
    return [
        pod
        for pod in pods
        if pod_job_name(pod) == job_name
        and (pod.get("status") or {}).get("phase") == "Running"
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]


def is_due(progress: RunProgress | None, job_name: str, *, interval: float, now: datetime) -> bool:
    """True when the execution's progress is missing or older than `interval` (or stamped in
    the future by a replica whose clock was ahead)."""
    if progress is None or progress.job_name != job_name or progress.updated_at is None:
        return True
    age = (now - progress.updated_at).total_seconds()
    return not 0 <= age < interval


def log_target(obs: Observed, settings: Settings, *, now: datetime) -> LogTarget | None:
    """The pod to read this pass, or None: nothing runs, or the progress is recent enough."""
    return next(iter(log_targets(obs, settings, now=now)), None)


def log_targets(obs: Observed, settings: Settings, *, now: datetime) -> tuple[LogTarget, ...]:
    """The pods to read this pass: the running pod of a run's one pod, or of each index of a
    run over several; none when nothing runs or the progress is recent enough."""
    job = running_job(obs)
    if job is None:
        return ()
    meta = job["metadata"]
    interval = interval_of(obs, settings)
    if not is_due(obs.previous.progress, meta["name"], interval=interval, now=now):
        return ()
    pods = running_pods(obs.pods, meta["name"])
    return tuple(
        LogTarget(meta["namespace"], pods[i]["metadata"]["name"], meta["name"], index=i)
        for i in sorted(pods, key=lambda i: -1 if i is None else i)
    )


def parse_report(text: str) -> ProgressReport | None:
    """The last progress report in a log tail; None when there is none."""
    for line in reversed(text.splitlines()):
        start = line.find(MARKER)  # a line may carry a prefix (a timestamp, a tag)
        if start < 0:
            continue
        try:
            data = json.loads(line[start:])
            return ProgressReport.model_validate(data[PROGRESS_KEY])
        except (ValueError, TypeError, KeyError, ValidationError):
            continue
    return None


# -- status.progress ------------------------------------------------------------------------


def with_progress(
    status: InferenceRunStatus, obs: Observed, *, now: datetime
) -> InferenceRunStatus:
    """The status with the progress of this pass."""
    progress = progress_of(status, obs, now=now)
    if progress == status.progress:
        return status
    return status.model_copy(update={"progress": progress})


def progress_of(status: InferenceRunStatus, obs: Observed, *, now: datetime) -> RunProgress | None:
    """Running: the latest report (kept between reads). One-shot runs keep their counts when
    suspended and finish with the final ones; a scheduled run shows only a running execution."""
    previous = obs.previous.progress
    job = running_job(obs)
    if job is not None:
        name = job["metadata"]["name"]
        kept = previous if previous is not None and previous.job_name == name else None
        if job_indexes(job) > 1:
            return _refreshed_shards(kept, obs.runner_log, job, obs.pods, now=now)
        return _refreshed(kept, obs.runner_log, name, now=now)
    if obs.spec.is_scheduled:
        return None
    if status.phase in ("Suspended", "Queued"):  # Queued: preempted, its counts kept
        return _paused(previous)
    if status.phase in FINISHED:
        return _final(previous, status)
    return None


def _refreshed(
    kept: RunProgress | None, log: RunnerLog | None, job_name: str, *, now: datetime
) -> RunProgress | None:
    if log is None or log.job_name != job_name:
        return kept  # not read this pass
    report = parse_report(log.text)
    if report is None:  # nothing reported yet, or a runner that never reports: looked at now
        base = kept or RunProgress(job_name=job_name)
        return displayed(base.model_copy(update={"updated_at": now}))
    share = share_of_report(report)
    eta = eta_of(share) if report.eta is None else report.eta
    return _shown(job_name, share, eta=eta, now=now)


def _shown(job_name: str, share: Share, *, eta: int | None, now: datetime) -> RunProgress:
    """The progress a run's status shows for these counts (one pod's, or the pods' summed)."""
    return displayed(
        RunProgress(
            job_name=job_name,
            records_read=share.read,
            records_written=share.written,
            records_failed=share.failed,
            records_total=share.total,
            records_per_second=None if share.rate is None else round(share.rate, 1),
            eta_seconds=eta,
            tokens_total=share.tokens,
            tokens_per_second=None if share.tokens_rate is None else round(share.tokens_rate, 1),
            updated_at=now,
        )
    )


def _refreshed_shards(
    kept: RunProgress | None, log: RunnerLog | None, job: Obj, pods: Sequence[Obj], *, now: datetime
) -> RunProgress | None:
    """A run over several pods: each index's newest report, or, for an index that reported
    nothing this pass (it finished, or its new pod has not reported yet), its last pod's
    summary; added up (controller/core/shards.py)."""
    name = job["metadata"]["name"]
    if log is None or log.job_name != name:
        return kept  # not read this pass
    exits = runner_exits(pods, name)
    parts: list[Share | None] = []
    for index in range(job_indexes(job)):
        report = parse_report(log.shards.get(index, ""))
        ended = exits.get(index)
        if report is not None:
            parts.append(share_of_report(report))
        elif ended is not None and ended.result is not None:
            parts.append(share_of_result(ended.result, finished=ended.exit_code == 0))
        else:
            parts.append(None)
    share = summed_shares(parts)
    if share is None:  # nothing reported yet: looked at now
        return displayed(
            (kept or RunProgress(job_name=name)).model_copy(update={"updated_at": now})
        )
    return _shown(name, share, eta=eta_of(share), now=now)


def _paused(previous: RunProgress | None) -> RunProgress | None:
    if previous is None:
        return None
    still = {"records_per_second": None, "eta_seconds": None, "tokens_per_second": None}
    return displayed(previous.model_copy(update=still))


def _final(previous: RunProgress | None, status: InferenceRunStatus) -> RunProgress | None:
    """The counts a finished run ends with: its result's; of the total as last reported, or
    all of it for a run that succeeded."""
    result = status.result
    if result is None:
        return _paused(previous)
    done = result.records_written + result.records_failed
    total = previous.records_total if previous is not None else None
    if status.phase == "Succeeded":
        total = done  # everything the input held was done (whatever a count said)
    return displayed(
        RunProgress(
            job_name=status.job_name,
            records_read=result.records_read,
            records_written=result.records_written,
            records_failed=result.records_failed,
            records_total=total,
            tokens_total=result.total_tokens,
            updated_at=previous.updated_at if previous is not None else status.completion_time,
        )
    )


def progress_wait(
    status: InferenceRunStatus, obs: Observed, settings: Settings, *, now: datetime
) -> float | None:
    """Seconds until the progress of a running execution is due again; None when none runs."""
    if running_job(obs) is None:
        return None
    interval = interval_of(obs, settings)
    progress = status.progress
    if progress is None or progress.updated_at is None:
        return interval
    age = (now - progress.updated_at).total_seconds()
    return max(interval - age, 1.0)


# -- what the printer columns show ----------------------------------------------------------


def percent(done: int, total: int | None) -> float | None:
    """`done` of `total` in percent (one decimal, at most 100); None without a total."""
    if total is None:
        return None
    if total == 0:
        return 100.0
    return min(round(done * 100 / total, 1), 100.0)


def displayed(progress: RunProgress) -> RunProgress:
    """The progress with what derives from its counts: the percent and the column texts."""
    text, pct = None, None
    if progress.records_written is not None or progress.records_failed is not None:
        done = (progress.records_written or 0) + (progress.records_failed or 0)
        pct = percent(done, progress.records_total)
        text = compact(done)
        if progress.records_total is not None:
            text += f"/{compact(progress.records_total)} ({int(pct or 0)}%)"
    rate = progress.records_per_second
    eta = progress.eta_seconds
    tokens = progress.tokens_per_second
    return progress.model_copy(
        update={
            "percent": pct,
            "text": text,
            "rate_text": None if rate is None else f"{compact(rate)}/s",
            "eta_text": None if eta is None else duration_text(eta),
            "tokens_per_second_text": None if tokens is None else f"{compact(tokens)}/s",
        }
    )


def compact(value: float) -> str:
    """0.5, 950, 1.2k, 12k, 3M, 1.5B: at most three significant digits."""
    if value < 10 and value != int(value):
        return f"{value:.1f}"
    if value < 999.5:
        return f"{value:.0f}"
    unit = "T"
    for candidate in ("k", "M", "B", "T"):
        value /= 1000
        unit = candidate
        if value < 999.5:
            break
    shown = f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
    return shown.removesuffix(".0") + unit


def duration_text(seconds: int) -> str:
    """45s, 5m, 1h20m, 2d3h: the two largest units, like kubectl's ages."""
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if minutes < 10 and rest else f"{minutes}m"
    if days == 0:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    rest = hours % 24
    return f"{days}d{rest}h" if rest else f"{days}d"
