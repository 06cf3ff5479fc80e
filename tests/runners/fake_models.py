"""Fast in-process model protocols for tests and the memory benchmark.

Nothing here talks to a network: `EchoClient` answers every record at once
from its input. Subprocess tests register it through the registry's
`LONGRUN_RUNNER_PLUGINS` hook (with this directory on PYTHONPATH), in place of
`kserve-v2`, because the contract's `model.protocol` only accepts the built-in
protocol names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from runners.api import InputRecord, Outcome, Prediction, RecordFailure, RunContext

PLUGIN_SPEC = "longrun.protocols:kserve-v2=fake_models:EchoClient"
# Seconds each predict() takes, for tests whose stores commit too fast to be interrupted.
DELAY_ENV = "FAKE_MODEL_DELAY_SECONDS"


class EchoClient:
    """Predicts `{"echo": <record id>}`; a record with field `poison` fails on its own."""

    def __init__(self, endpoint: Any = None, ctx: RunContext | None = None) -> None:
        self.endpoint = endpoint
        self.delay = float(os.environ.get(DELAY_ENV) or 0)

    def predict(self, records: Sequence[InputRecord]) -> list[Outcome]:
        if self.delay:
            time.sleep(self.delay)
        return [
            RecordFailure("poison record") if r.data.get("poison") else Prediction({"echo": r.id})
            for r in records
        ]

    def close(self) -> None:
        pass
