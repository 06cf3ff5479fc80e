"""The runner's progress line: the counts a running runner prints for the controller to read.

Kept apart from the run's status (contracts/run.py re-exports it) because it is a wire format
of its own, short keys and all, read from pod logs rather than written to the API server.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# The runner's progress line: one JSON object per line, `{"longrunProgress": {...}}`, every
# `progressIntervalSeconds`. The controller reads the last one through the `pods/log`
# subresource (the pod holds no API credentials) into `status.progress`.
PROGRESS_KEY = "longrunProgress"
COUNT_MAX = 2**53  # JSON numbers stay exact


class ProgressReport(BaseModel):
    """The counts in one runner progress line (short keys: the line is read from pod logs).

    Whole-run counts, including chunks an earlier pod committed; of a run over several pods,
    the counts of the pod's index only, `total` its share of the input (the controller adds
    the indexes up). Unknown keys are ignored, so a runner may add more; the line is
    user-controlled text and is validated as such.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    read: int = Field(default=0, ge=0, le=COUNT_MAX, description="Records read.")
    written: int = Field(default=0, ge=0, le=COUNT_MAX, description="Predictions written.")
    failed: int = Field(default=0, ge=0, le=COUNT_MAX, description="Records failed.")
    total: int | None = Field(
        default=None, ge=0, le=COUNT_MAX, description="Input records, when the source knows."
    )
    rate: float | None = Field(default=None, ge=0, le=1e12, description="Records per second.")
    eta: int | None = Field(default=None, ge=0, le=COUNT_MAX, description="Seconds left.")
    tokens: int | None = Field(
        default=None, ge=0, le=COUNT_MAX, description="OpenAI protocols: total tokens so far."
    )
    tokens_rate: float | None = Field(
        default=None,
        ge=0,
        le=1e12,
        alias="tokenRate",
        description="OpenAI protocols: tokens per second.",
    )
