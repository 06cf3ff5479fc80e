"""`runner.concurrency`: how many model requests the runner has in flight, or `auto`.

Why apart from contracts/config.py: the three knobs of `auto` (runners/pace.py finds the
number, `maxConcurrency` bounds it, `initialConcurrency` starts it; a deploymentRef's slots
times ready replicas fill the start in, controller/core/serving/uses.py) go together, with the
rules that tie them, which the CRD checks too (CEL, same words). RunnerTuning extends this.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator

from contracts.base import Schema, cel

AUTO = "auto"
AUTO_MAX_CONCURRENCY = 64
AUTO_INITIAL_CONCURRENCY = 4
AUTO_ONLY = "maxConcurrency and initialConcurrency: only with concurrency: auto"
CONCURRENCY_VALUE = "a number of requests from 1 to 256, or auto"
CONCURRENCY_RANGE = f"concurrency: {CONCURRENCY_VALUE}"
INITIAL_ABOVE_MAX = "initialConcurrency: must not exceed maxConcurrency"


def _check_concurrency(value: object) -> object:
    """A number of requests from 1 to 256 (not a numeric string), or "auto"."""
    if value == AUTO:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 256:
        return value
    raise ValueError(CONCURRENCY_VALUE)


# Requests in flight: a number, or "auto" (int-or-string in the CRD, checked there by a CEL rule
# of RunnerTuning that says the same as this validator).
Concurrency = Annotated[
    int | Literal["auto"],
    BeforeValidator(_check_concurrency),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": 256},
                {"type": "string", "enum": [AUTO]},
            ]
        }
    ),
]


class ConcurrencyTuning(Schema):
    """Model requests in flight: a number, or `auto` within a maximum (docs/contract.md)."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "!has(self.concurrency) || (type(self.concurrency) == string ? "
            "self.concurrency == 'auto' : "
            "(self.concurrency >= 1 && self.concurrency <= 256))",
            CONCURRENCY_RANGE,
            "(!has(self.maxConcurrency) && !has(self.initialConcurrency)) || "
            "(has(self.concurrency) && type(self.concurrency) == string)",
            AUTO_ONLY,
            "!has(self.initialConcurrency) || self.initialConcurrency <= "
            f"(has(self.maxConcurrency) ? self.maxConcurrency : {AUTO_MAX_CONCURRENCY})",
            INITIAL_ABOVE_MAX,
        )
    )

    # 8 requests in flight and 256 records each: 50-100k records/s against Triton, KServe and
    # MLServer on 2 cores, where 4 and 32 made 12-28k (bench/README.md, "tuning.py").
    concurrency: Concurrency = Field(
        default=8,
        description=(
            "Model requests in flight at once (1-256), or auto: the runner raises them while "
            "records/s grow, and lowers them when latency rises or the server answers 429/503, "
            "between 1 and maxConcurrency (docs/contract.md)."
        ),
        json_schema_extra={"x-kubernetes-int-or-string": True},
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=(
            f"concurrency auto: the most requests in flight (default {AUTO_MAX_CONCURRENCY})."
        ),
    )
    initial_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=256,
        description=(
            "concurrency auto: requests in flight at the start. Default: the slots the "
            "deploymentRef's ModelDeployment declares times its ready replicas, else "
            f"{AUTO_INITIAL_CONCURRENCY}."
        ),
    )

    @model_validator(mode="after")
    def _auto_fields(self) -> ConcurrencyTuning:
        if not self.is_auto and (
            self.max_concurrency is not None or self.initial_concurrency is not None
        ):
            raise ValueError(AUTO_ONLY)
        if (self.initial_concurrency or 0) > (self.max_concurrency or AUTO_MAX_CONCURRENCY):
            raise ValueError(INITIAL_ABOVE_MAX)
        return self

    @property
    def is_auto(self) -> bool:
        """Whether the runner finds the concurrency itself (`concurrency: auto`)."""
        return self.concurrency == AUTO

    @property
    def concurrency_cap(self) -> int:
        """The most requests in flight: the fixed concurrency, or auto's maximum."""
        if isinstance(self.concurrency, int):
            return self.concurrency
        return self.max_concurrency or AUTO_MAX_CONCURRENCY

    @property
    def concurrency_start(self) -> int:
        """Requests in flight at the start: the fixed concurrency, or auto's initial one."""
        if isinstance(self.concurrency, int):
            return self.concurrency
        start = self.initial_concurrency or AUTO_INITIAL_CONCURRENCY
        return min(start, self.concurrency_cap)
