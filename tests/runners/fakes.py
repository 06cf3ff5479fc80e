"""Test doubles for the pipeline: a model client driven by a handler function.

The httpx MockTransport idea: a test hands a plain function to `FakeModel`,
which calls it for every `predict` and records what it saw (batches, peak
concurrency), so tests state behaviour without a server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from contracts.contract import RunnerContract
from runners.api import InputRecord, Outcome, Prediction

Handler = Callable[[Sequence[InputRecord]], list[Outcome]]


def echo(records: Sequence[InputRecord]) -> list[Outcome]:
    """Predict `{"echo": id}` for every record."""
    return [Prediction({"echo": r.id}) for r in records]


class FakeModel:
    """A thread-safe ModelClient that delegates to `handler` and records calls."""

    def __init__(self, handler: Handler = echo) -> None:
        self.handler = handler
        self.batches: list[list[str]] = []
        self.sent = 0
        self.in_flight = 0
        self.peak = 0
        self.closed = False
        self._lock = threading.Lock()

    def predict(self, records: Sequence[InputRecord]) -> list[Outcome]:
        with self._lock:
            self.batches.append([r.id for r in records])
            self.sent += len(records)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            return self.handler(records)
        finally:
            with self._lock:
                self.in_flight -= 1

    def close(self) -> None:
        self.closed = True

    def factory(self, endpoint: Any = None, ctx: Any = None) -> FakeModel:
        """Use as a ModelClientFactory that always returns this instance."""
        return self


def contract(
    *,
    input: dict[str, Any] | None = None,
    output: dict[str, Any] | None = None,
    runner: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A valid contract document (wire format) with the given blocks."""
    doc: dict[str, Any] = {
        "contractVersion": "v1",
        "jobId": "uid-1",
        "jobName": "job-1",
        "run": {
            "name": "r",
            "namespace": "ns",
            "uid": "uid-1",
            "generation": 1,
            "scheduled": False,
        },
        "config": {"name": "c", "namespace": "ns", "generation": 1},
        "model": {"protocol": "kserve-v2", "url": "http://model.invalid", "name": "m"},
        "input": input or {"memory": {"name": "in"}},
        "output": output or {"memory": {"name": "out"}},
        "runner": {"progressIntervalSeconds": 1, **(runner or {})},
        **extra,
    }
    RunnerContract.model_validate(doc)
    return doc
