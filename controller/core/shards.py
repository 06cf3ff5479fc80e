"""A run over several pods (spec.parallelism): which pod is which index, and how the indexes'
numbers add up to the run's. Pure.

The pods of an Indexed Job carry their index (`batch.kubernetes.io/job-completion-index`, an
annotation, and a label from Kubernetes 1.28 on). Each index owns a fixed part of the input
(contracts/contract.py `Partitioning`) and reports on its part only: its summary
(termination message) counts the records of its index, its progress lines count its share,
`total` included. So the run's counts are the sums over its indexes, each index counted
once, from its newest pod (a replaced pod's successor counts the chunks its predecessor
committed too). A run over one pod has no index: nothing here changes what it shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contracts.run import COUNT_MAX, ProgressReport, RunResult

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def pod_index(pod: dict[str, object]) -> int | None:
    """The pod's completion index; None for a pod of a Job that is not Indexed."""
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        return None
    for where in ("annotations", "labels"):
        value = (meta.get(where) or {}).get(INDEX_KEY)
        if isinstance(value, str) and value.isdigit():
            return int(value)
    return None


def _total(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return min(sum(known), COUNT_MAX) if known else None


def _completed(said: Iterable[bool | None]) -> bool | None:
    """Whether one index completed the run: None unless every index says (a runner too old
    to say, a summary lost)."""
    values = list(said)
    return None if None in values else any(values)


def summed_result(results: Sequence[RunResult], *, reason: str | None) -> RunResult:
    """The run's summary from its indexes' summaries: counts and tokens add, the duration is
    the longest (they ran side by side), output places are the same for all; `reason` is
    the failed index's."""
    return RunResult(
        records_read=sum(r.records_read for r in results),
        records_written=sum(r.records_written for r in results),
        records_failed=sum(r.records_failed for r in results),
        records_retried=sum(r.records_retried for r in results),
        chunks=sum(r.chunks for r in results),
        duration_seconds=max((r.duration_seconds for r in results), default=0),
        output=next((r.output for r in results if r.output), None),
        error_output=next((r.error_output for r in results if r.error_output), None),
        reason=reason,
        run_completed=_completed(r.run_completed for r in results),
        prompt_tokens=_total(r.prompt_tokens for r in results),
        completion_tokens=_total(r.completion_tokens for r in results),
        total_tokens=_total(r.total_tokens for r in results),
    )


@dataclass(frozen=True)
class Share:
    """One index's live counts (or the run's, summed): a progress report's numbers."""

    read: int
    written: int
    failed: int
    total: int | None  # None: not known
    rate: float | None = None
    tokens: int | None = None
    tokens_rate: float | None = None

    @property
    def done(self) -> int:
        """Records written or failed."""
        return self.written + self.failed


def share_of_report(report: ProgressReport) -> Share:
    """An index's counts from its pod's newest progress line."""
    return Share(
        report.read,
        report.written,
        report.failed,
        report.total,
        report.rate,
        report.tokens,
        report.tokens_rate,
    )


def share_of_result(result: RunResult, *, finished: bool) -> Share:
    """An index's counts from its last pod's summary: an index that finished (exit 0) did
    all of its share, so its total is what it did; a pod that stopped tells no total."""
    done = result.records_written + result.records_failed
    return Share(
        result.records_read,
        result.records_written,
        result.records_failed,
        done if finished else None,
        tokens=result.total_tokens,
    )


def summed_shares(shares: Sequence[Share | None]) -> Share | None:
    """The run's counts from each index's (None: nothing known of that index yet). Counts,
    rates and tokens add; the total is known only when every index's is."""
    known = [s for s in shares if s is not None]
    if not known:
        return None
    rates = [s.rate for s in known if s.rate is not None]
    token_rates = [s.tokens_rate for s in known if s.tokens_rate is not None]
    all_totals = len(known) == len(shares) and all(s.total is not None for s in known)
    return Share(
        read=min(sum(s.read for s in known), COUNT_MAX),
        written=min(sum(s.written for s in known), COUNT_MAX),
        failed=min(sum(s.failed for s in known), COUNT_MAX),
        total=_total(s.total for s in known) if all_totals else None,
        rate=sum(rates) if rates else None,
        tokens=_total(s.tokens for s in known),
        tokens_rate=sum(token_rates) if token_rates else None,
    )


def eta_of(share: Share) -> int | None:
    """Seconds left: what is left of the total at the summed rate, when both are known."""
    if share.total is None or not share.rate:
        return None
    return round(max(share.total - share.done, 0) / share.rate)
