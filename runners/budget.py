"""The error budget: how many failed records a run tolerates, judged against the right count.

Why not simply against the records done so far (issue 15): failures often come in clusters,
so a ratio judged against a running count fails runs whose bad records happen to come early
(20 in the first 1,000 of 20,000 records are 2 %, but 0.1 % of the run). So:

- `maxFailedRecords` failures are always tolerated; beyond them the run fails unless
  `maxFailedRatio` allows the failures: failed <= ratio x N, where N is
  - the input's total, when the source can say it (`Source.total()`, counted on a thread of
    its own while the run goes on): exact from the first chunk on;
  - else the records done, once at least BUDGET_MIN_RECORDS are done (a smaller sample says
    too little about the whole input), and at the end of the run, when the records done are
    the whole input.
- A run over its budget fails for good: the same records would fail again in a retried pod,
  so the runner exits with the code the Job's podFailurePolicy treats as final (2, see
  runners/cli.py), after committing the chunk that crossed the budget, so that every failed
  record is in the error output.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.config import RunnerTuning

# Records done before a ratio is judged against them, when the input's total is unknown.
BUDGET_MIN_RECORDS = 10_000


class BudgetExceeded(Exception):
    """More records failed than the error budget allows; the message says by how much."""


@dataclass(frozen=True)
class Budget:
    """The run's `maxFailedRecords` and `maxFailedRatio`."""

    max_records: int = 0
    max_ratio: float | None = None

    @classmethod
    def from_tuning(cls, tuning: RunnerTuning) -> Budget:
        """The budget the run's `runner` tuning sets."""
        return cls(tuning.max_failed_records, tuning.max_failed_ratio)

    def excess(self, failed: int, done: int, *, total: int | None, final: bool) -> str | None:
        """Why `failed` failures of `done` records are over budget, or None while they are not.

        `total` is the input's record count when known; `final` says that `done` is the whole
        input (the end of the run).
        """
        if failed <= self.max_records:
            return None
        limit = f"maxFailedRecords={self.max_records}"
        if self.max_ratio is not None:
            if not final and total is None and done < BUDGET_MIN_RECORDS:
                return None  # too few records to judge a ratio by
            base = done if final or total is None else total
            if failed <= self.max_ratio * base:
                return None
            limit += f" and maxFailedRatio={self.max_ratio}"
            if base != done:
                limit += f" of the input's {base} records"
        return f"error budget exceeded: {failed} failed records of {done} ({limit})"
