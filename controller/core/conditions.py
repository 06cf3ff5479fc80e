"""Kubernetes-style conditions, kept the way apimachinery's meta/conditions.go keeps them.

`lastTransitionTime` moves only when a condition's status flips; a new reason or
message alone does not move it. That keeps status writes rare and makes the
time mean what users expect ("since when has this been failing?").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from contracts.base import Condition


@dataclass(frozen=True)
class Want:
    """A desired condition, before transition times are resolved."""

    type: str
    status: bool
    reason: str
    message: str = ""


def find(conditions: list[Condition], type_: str) -> Condition | None:
    """The condition of `type_`, if present."""
    return next((c for c in conditions if c.type == type_), None)


def resolve(
    previous: list[Condition], wanted: list[Want], *, now: datetime, generation: int
) -> list[Condition]:
    """Desired conditions with transition times carried over where status did not flip."""
    resolved: list[Condition] = []
    for want in wanted:
        status = "True" if want.status else "False"
        old = find(previous, want.type)
        unchanged = old is not None and old.status == status and old.last_transition_time
        resolved.append(
            Condition(
                type=want.type,
                status=status,
                reason=want.reason,
                message=want.message[:32768],
                last_transition_time=old.last_transition_time if unchanged and old else now,
                observed_generation=generation,
            )
        )
    return resolved
