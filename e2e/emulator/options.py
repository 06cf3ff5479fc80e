"""Per-request options: query parameters and DeleteOptions that change semantics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    """Per-request options that change semantics (query parameters)."""

    dry_run: bool = False
    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)


@dataclass
class DeleteOptions:
    propagation: str | None = None
    grace_period: int | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None
    # Only an explicit orphanDependents=false turns "not gone yet" into 202 Accepted.
    orphan_dependents: bool | None = None

    @classmethod
    def from_body(cls, body: dict[str, Any] | None, query: dict[str, str]) -> DeleteOptions:
        body = body or {}
        pre = body.get("preconditions") or {}
        policy = query.get("propagationPolicy") or body.get("propagationPolicy")
        orphan = query.get("orphanDependents", body.get("orphanDependents"))
        orphans = None if orphan is None else str(orphan).lower() == "true"
        if policy is None and orphans is not None:
            policy = "Orphan" if orphans else "Background"
        grace = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
        return cls(
            propagation=policy,
            grace_period=None if grace is None else int(grace),
            precondition_uid=pre.get("uid"),
            precondition_rv=pre.get("resourceVersion"),
            orphan_dependents=orphans,
        )
