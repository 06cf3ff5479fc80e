"""One run across several pods: which chunks are this pod's, and who completes the output.

The rules are the contract's (contracts/contract.py `Partitioning`, docs/shared-clusters.md).
Either way a chunk keeps its run-wide number, so the output of a run over N pods is the output
one pod would write. Why chunks and not an id hash: a chunk is already the unit of commit and
resume, and every source can say a record's position.
- `chunkRoundRobin`: chunk c belongs to index c mod count. Every pod reads the whole input in
  order and passes over the others' chunks, so it needs nothing up front, and the duplicate-id
  screen (runners/recordids.py) sees every id before its own chunks'.
- `chunkRanges` (the controller's choice for Parquet input, whose footers say its row counts
  and which is read from any row group, and for SQL tables, COUNT(*) and OFFSET in their one
  order): the input's K chunks are cut into count
  contiguous ranges, index i owning [i*K // count, (i+1)*K // count). A pod counts the input
  (`Source.total`) before it reads, then reads from its range's start to its end only. When
  ids come from a field, it first reads the records before its range for their ids alone (no
  model call), so the screen refuses what a one-pod run would. The last index also owns
  whatever lies past the counted end. After its last chunk a pod counts again
  (`check_count`): a count that moved fails it (exit 2), as the ranges may no longer fit.

Completing the run: no pod knows when the others are done, so each one, after its own last
chunk, looks at what the output holds. The committed chunks of the whole run are a prefix
0..K-1 with no input record at position K x chunkSize exactly when every chunk is committed;
the pod that finds so writes the completion marker and judges the error budget on the whole
run. Each pod looks after its own last commit, so the last pod to commit always finds it;
two that find it at once write the same manifest. It completes only when the committed chunks
hold the input's records (`held`, which a one-pod run checks too), and each pod's summary
says whether it completed the run: when all exit 0 and none did, the controller fails the
run (controller/core/jobs.py `incomplete`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from contracts.contract import CHUNK_RANGES, COMPLETION_INDEX_ENV, ROUND_ROBIN, Partitioning
from runners.api import ConfigError, InputRecord, Sink
from runners.budget import Budget, BudgetExceeded
from runners.commit import committed_counts


@dataclass(frozen=True)
class Shard:
    """This pod's index of `count`, under `rule`; `chunks` is its range [first, end) under
    chunkRanges once the input is counted (`bound`; end None: to the input's end)."""

    index: int
    count: int
    rule: str = ROUND_ROBIN
    chunks: tuple[int, int | None] | None = None

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
        return cls(int(text), partitioning.count, partitioning.rule)

    @classmethod
    def one(cls) -> Shard:
        """The whole input, for a one-pod run."""
        return cls(0, 1)

    @property
    def whole(self) -> bool:
        """One pod does the whole run."""
        return self.count == 1

    @property
    def ranged(self) -> bool:
        """The pods own contiguous ranges (chunkRanges): `bound` first."""
        return self.rule == CHUNK_RANGES and not self.whole

    def bound(self, total: int | None, size: int, *, log: Callable[[str], None]) -> Shard:
        """Under chunkRanges, this shard with its range of the input's `total` positions in
        chunks of `size` (the same in every pod that counts the same input); else itself."""
        if not self.ranged:
            return self
        if total is None:
            raise ConfigError(
                "partitioning: rule chunkRanges needs the input's record count before reading, "
                "and this input cannot give it (use format: parquet, or rule chunkRoundRobin)"
            )
        chunks = -(-total // size)
        first = self.index * chunks // self.count
        last = self.index == self.count - 1
        shard = replace(
            self, chunks=(first, None if last else (self.index + 1) * chunks // self.count)
        )
        log(f"{shard.describe()} of the input's {chunks} ({total} records)")
        return shard

    def check_count(self, counted: int | None, count: Callable[[], int | None]) -> None:
        """Under chunkRanges, ConfigError when the input no longer holds the `counted` records
        this pod's range came from: the pods that counted before and after the change cut
        different ranges, and a chunk between two of them would be no pod's, so no pod would
        ever complete the run. Exit 2 fails the run at once, saying why, rather than leave an
        output that is never marked complete under pods that all exit 0."""
        if not self.ranged or counted is None:
            return
        now = count()
        if now != counted:
            raise ConfigError(
                f"partitioning: the input changed while the run ran: {counted} records when "
                f"this pod started, {now} now, so the pods' ranges (rule chunkRanges) may no "
                "longer fit together; leave the input as it is until the run ends, then run "
                "it again (committed chunks are kept)"
            )

    def _range(self) -> tuple[int, int | None]:
        if self.chunks is None:
            raise AssertionError("a chunkRanges shard is bound to the input's count first")
        return self.chunks

    def owns(self, chunk: int) -> bool:
        """Chunk `chunk` is this pod's to commit."""
        if not self.ranged:
            return chunk % self.count == self.index
        first, end = self._range()
        return first <= chunk and (end is None or chunk < end)

    def first_missing(self, committed: set[int]) -> int:
        """This pod's first chunk not committed (under chunkRanges, its range's end when every
        chunk of it is)."""
        step = 1 if self.ranged else self.count
        chunk = self._range()[0] if self.ranged else self.index
        while chunk in committed and self.owns(chunk):
            chunk += step
        return chunk

    def before(self, chunk: int) -> int:
        """How many of this pod's chunks come before `chunk`."""
        if not self.ranged:
            return len(range(self.index, chunk, self.count))
        first, end = self._range()
        return max(0, (chunk if end is None else min(chunk, end)) - first)

    def end(self, size: int) -> int | None:
        """The position this pod stops reading at (its range's end); None: the input's end."""
        if not self.ranged:
            return None
        end = self._range()[1]
        return None if end is None else end * size

    def share(self, total: int | None, size: int) -> int | None:
        """How many of the input's `total` positions are in this pod's chunks."""
        if total is None or self.whole:
            return total
        if self.ranged:
            first, end = self._range()
            stop = total if end is None else min(total, end * size)
            return max(0, stop - first * size)
        full, rest = divmod(total, size)  # `full` whole chunks, then one of `rest` records
        mine = self.before(full) * size
        return mine + (rest if self.owns(full) else 0)

    def describe(self) -> str:
        """For the start line: `index 2 of 4` (and its chunks, under chunkRanges)."""
        text = f"index {self.index} of {self.count}"
        if self.ranged and self.chunks is not None:
            first, end = self.chunks
            text += f", chunks {first} to {'the end' if end is None else end - 1}"
        return text


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
    BudgetExceeded when the whole run's failures are over its budget; ConfigError when the
    committed chunks do not hold the input's records (`held`).

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
    held((sink, error_sink), input_end, written + failed, records)
    excess = budget.excess(failed, written + failed, total=None, final=True)
    if excess:
        raise BudgetExceeded(f"{excess} (the whole run, all its pods)")
    return written, failed, len(chunks)


def held(
    sinks: tuple[Sink, Sink],
    input_end: int | None,
    count: int,
    records: Callable[[int], Generator[InputRecord, None, None]],
) -> None:
    """ConfigError unless the committed chunks' `count` records (written or failed) are the
    input's: as many as the positions up to `input_end` (this pod read there) or, when it
    did not read there, with no record at position `count` (positions are dense: each is one
    record, readable or not, and each of those is written or failed once).

    They differ when the input changed while the run ran: records were appended after a pod
    read to the end and committed the last chunk as it was then, and a pod that read later
    (or a later attempt, resuming) committed the chunks past it; the records between were
    never sent, yet every chunk is committed. Completing would present that output as whole.
    Not judged unless both sinks count what they hold (`Sink.counts_committed`): the pod
    log, a receiver without a committed URL or a plug-in's sink would make `count` short.
    """
    if not all(getattr(sink, "counts_committed", False) for sink in sinks):
        return
    if input_end is not None:
        ok, now = count == input_end, str(input_end)
    else:
        with contextlib.closing(records(count)) as rest:
            ok, now = next(rest, None) is None, f"more than {count}"
    if not ok:
        raise ConfigError(
            f"the input changed while the run ran: the output's committed chunks hold {count} "
            f"records and the input has {now} now, so the output does not hold each input "
            "record once. It is not marked complete and cannot be as it is: delete it (or give "
            "the run a new output), then run again, leaving the input as it is until it ends"
        )


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
