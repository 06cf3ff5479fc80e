"""A batch's outcomes as plain values: the built-in clients' fast path, internal to the runner.

Why not in runners/api.py: plug-in clients return a plain list of Prediction and
RecordFailure (the ModelClient contract); this type only saves the built-in
clients one object per record, and the pipeline accepts both (`Outcomes.of`).
Keeping it out of the plug-point module keeps that contract small.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from runners.api import Outcome, Prediction, RecordFailure


class Outcomes(Sequence[Outcome]):
    """One batch's outcomes held as plain values: a Prediction is made only when one is read.

    Record i's prediction is `values[i]` unless `failures` holds i (its value is then
    meaningless). Reads like a `list[Outcome]` (index, iterate, compare equal to a list of the
    same outcomes), but costs one list per batch instead of one object per record: a sixth
    of a tensor client's CPU at 256 records per batch (bench/runner_client_cpu.py). Built-in
    clients return it and the pipeline reads `values` and `failures` directly; `Outcomes.of`
    turns a plug-in's plain list into one.
    `usage`, when a client gives it (the OpenAI ones), holds each record's token usage (a
    dict, or None), beside `values`; None otherwise, so the tensor clients pay nothing.
    `overloaded` counts the 429/503 answers the client retried itself while making them (the
    OpenAI clients retry each request): `concurrency: auto` hears of them (runners/modelcalls.py).
    Immutable by convention, like the per-record types.
    """

    __slots__ = ("failures", "overloaded", "usage", "values")

    def __init__(
        self,
        values: Sequence[Any],
        failures: Mapping[int, RecordFailure] | None = None,
        usage: list[Any] | None = None,
        *,
        overloaded: int = 0,
    ):
        self.values = values
        self.failures: Mapping[int, RecordFailure] = failures or {}
        self.usage = usage
        self.overloaded = overloaded

    @classmethod
    def all_failed(cls, size: int, reason: str, *, code: str | None = None) -> Outcomes:
        """`size` outcomes, each a RecordFailure for `reason` (with `code`, if given)."""
        return cls([None] * size, dict.fromkeys(range(size), RecordFailure(reason, code)))

    @classmethod
    def of(cls, outcomes: Iterable[Outcome]) -> Outcomes:
        """The Outcomes holding `outcomes`; raises TypeError for anything else in it."""
        if isinstance(outcomes, Outcomes):
            return outcomes
        values: list[Any] = []
        failures: dict[int, RecordFailure] = {}
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, Prediction):
                values.append(outcome.value)
            elif isinstance(outcome, RecordFailure):
                values.append(None)
                failures[index] = outcome
            else:
                raise TypeError(
                    f"outcome {index} is a {type(outcome).__name__}, "
                    "not a Prediction or a RecordFailure"
                )
        return cls(values, failures)

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Outcome: ...

    @overload
    def __getitem__(self, index: slice) -> list[Outcome]: ...

    def __getitem__(self, index: int | slice) -> Outcome | list[Outcome]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self.values)))]
        value = self.values[index]  # IndexError as a list's
        failure = self.failures.get(index % len(self.values))
        return failure if failure is not None else Prediction(value)

    def __iter__(self) -> Iterator[Outcome]:
        failures = self.failures
        for index, value in enumerate(self.values):
            failure = failures.get(index)
            yield failure if failure is not None else Prediction(value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Outcomes, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, mutable like them

    def __repr__(self) -> str:
        return f"Outcomes({list(self)!r})"
