"""One run across several pods: which chunks are this pod's, and who completes the output.

The rule is the contract's (contracts/contract.py `Partitioning`, docs/shared-clusters.md):
chunk c belongs to index c mod count, and keeps its run-wide number, so the output of a run
over N pods is the output one pod would write. Why chunks and not an id hash: a chunk is
already the unit of commit and resume, every source can say a record's position, and every
pod still sees every record in order, so the duplicate-id screen (runners/recordids.py)
refuses the same records in every layout.

Completing the run: no pod knows when the others are done, so each one, after its own last
chunk, looks at what the output holds. The committed chunks of the whole run are a prefix
0..K-1 with no input record at position K x chunkSize exactly when every chunk is committed;
the pod that finds so writes the completion marker and judges the error budget on the whole
run. Each pod looks after its own last commit, so the last pod to commit always finds it;
two that find it at once write the same manifest.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from contracts.contract import COMPLETION_INDEX_ENV, Partitioning
from runners.api import ConfigError, InputRecord, Sink
from runners.budget import Budget, BudgetExceeded
from runners.commit import committed_counts


@dataclass(frozen=True)
class Shard:
    """This pod's index of `count`."""

    index: int
    count: int

    @classmethod
    def from_contract(cls, partitioning: Partitioning | None, env: Mapping[str, str]) -> Shard:
        """The pod's shard; the whole input (0 of 1) for a one-pod run."""
        if partitioning is None:
            return cls(0, 1)
        text = env.get(COMPLETION_INDEX_ENV)
        if text is None:
            raise ConfigError(
                f"partitioning: the run is shared by {partitioning.count} pods but "
                f"${COMPLETION_INDEX_ENV} is not set (run it as an Indexed Job, or set it)"
            )
        if not text.isdigit() or int(text) >= partitioning.count:
            raise ConfigError(
                f"partitioning: ${COMPLETION_INDEX_ENV}={text!r} is not an index of the run's "
                f"{partitioning.count} pods (0 to {partitioning.count - 1})"
            )
        return cls(int(text), partitioning.count)

    @classmethod
    def one(cls) -> Shard:
        """The whole input, for a one-pod run."""
        return cls(0, 1)

    @property
    def whole(self) -> bool:
        """One pod does the whole run."""
        return self.count == 1

    def owns(self, chunk: int) -> bool:
        """Chunk `chunk` is this pod's to commit."""
        return chunk % self.count == self.index

    def first_missing(self, committed: set[int]) -> int:
        """This pod's first chunk not committed."""
        chunk = self.index
        while chunk in committed:
            chunk += self.count
        return chunk

    def before(self, chunk: int) -> int:
        """How many of this pod's chunks come before `chunk`."""
        return len(range(self.index, chunk, self.count))

    def share(self, total: int | None, size: int) -> int | None:
        """How many of the input's `total` positions are in this pod's chunks."""
        if total is None or self.whole:
            return total
        full, rest = divmod(total, size)  # `full` whole chunks, then one of `rest` records
        mine = self.before(full) * size
        return mine + (rest if self.owns(full) else 0)

    def describe(self) -> str:
        """For the start line: `index 2 of 4`."""
        return f"index {self.index} of {self.count}"


def prefix_end(committed: set[int]) -> int:
    """K: the chunks 0..K-1 are all committed, chunk K is not."""
    chunk = 0
    while chunk in committed:
        chunk += 1
    return chunk


def whole_run(
    sink: Sink,
    error_sink: Sink,
    *,
    size: int,
    input_end: int | None,
    records: Callable[[int], Generator[InputRecord, None, None]],
    retrying: Callable[[Callable[[], Any]], Any],
    budget: Budget,
) -> tuple[int, int, int] | None:
    """(written, failed, chunks) of the whole run when every chunk of it is committed, else None;
    BudgetExceeded when the whole run's failures are over its budget.

    `input_end` is past the input's last position, when this pod read up to there; else
    (it read nothing) the input is probed where the committed chunks end.
    """
    chunks = set(range(prefix_end(retrying(sink.committed))))
    end = len(chunks) * size
    if input_end is None:
        with contextlib.closing(records(end)) as rest:
            more = next(rest, None) is not None
    else:
        more = input_end > end
    if more:
        return None
    counts = committed_counts(sink, error_sink, chunks, retrying=retrying)
    written, failed = counts.get("written", 0), counts.get("failed", 0)
    excess = budget.excess(failed, written + failed, total=None, final=True)
    if excess:
        raise BudgetExceeded(f"{excess} (the whole run, all its pods)")
    return written, failed, len(chunks)


def early_excess(budget: Budget, failed: int, *, run: int | None) -> str | None:
    """Why this pod's `failed` records alone spend the whole run's budget, or None.

    While the others run, a pod knows only its own failures: they spend the budget only when
    the whole run's would be spent by them alone (a ratio needs the input's total for that).
    The whole run is judged once, by the pod that completes it.
    """
    if budget.max_ratio is not None and run is None:
        return None
    if budget.excess(failed, failed, total=run, final=False) is None:
        return None
    return (
        f"error budget exceeded: this pod's {failed} failed records alone are over the whole "
        f"run's budget ({_limits(budget, run)})"
    )


def _limits(budget: Budget, run_total: int | None) -> str:
    text = f"maxFailedRecords={budget.max_records}"
    if budget.max_ratio is not None:
        text += f" and maxFailedRatio={budget.max_ratio} of the input's {run_total} records"
    return text
