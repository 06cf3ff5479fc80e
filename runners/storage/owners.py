"""Whose output a file directory or an S3 prefix holds: the rule the `file` and `s3` sinks share.

Why: those locations are keyed by nothing but their path, and their part files say nothing
about who wrote them. A second run of a config (a new InferenceRun, so a new UID, often with
other `parameters`) took the first run's chunks for its own: it made no model call,
reported every record written and replaced the first run's `_SUCCESS`.

The rule, the same for every sink (SQL rows, HTTP and Krateo bodies carry the run UID and
Job name, so runs share those side by side): a run resumes only its own chunks, and never
overwrites, counts or completes another run's output. Here that means:
- the first sink to open a location claims it with a marker, `_RUN`, holding the run UID,
  Job name and role; it is created only if absent (a hard link or a conditional PUT), so of
  two runs starting at once exactly one gets the location;
- a sink of another run or Job, or of the other role (an `errors` storage pointing at the
  output), is refused: ConfigError (exit 2, not retried) naming the location and its
  owner, before anything is read, predicted or written;
- a location without a marker that holds part files (written by an older longrun) belongs
  to the run its `_SUCCESS` manifest names, or to nobody known: refused as well.
A scheduled run's executions each write below `<path>/<Job name>`, so they never meet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from runners.api import ConfigError, RunContext

MARKER = "_RUN"


@dataclass(frozen=True)
class Owner:
    """The run, Job and role a location belongs to."""

    run_uid: str
    job_name: str
    role: str

    @classmethod
    def of(cls, ctx: RunContext, role: str) -> Owner:
        """The owner a sink of `ctx` with `role` would be."""
        return cls(ctx.run_uid, ctx.job_name, role)

    def to_json(self) -> bytes:
        """The marker's content."""
        body = {"runUid": self.run_uid, "jobName": self.job_name, "role": self.role}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner | None:
        """The owner a marker or a `_SUCCESS` manifest names; None when it names none."""
        try:
            body: Any = json.loads(data)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        uid, job = body.get("runUid"), body.get("jobName")
        if not isinstance(uid, str) or not isinstance(job, str):
            return None
        return cls(uid, job, str(body.get("role") or "output"))


def refusal(location: str, owner: Owner | None, *, field: str) -> ConfigError:
    """The error for a sink whose location holds another run's output (see module doc)."""
    if owner is None:
        held = f"part files that no run claims (no {MARKER} marker)"
    else:
        held = f"the {owner.role} of run {owner.run_uid} (Job {owner.job_name})"
    return ConfigError(
        f"{field}: {location} holds {held}; a run writes only where no other run has: give "
        f"this run another {field}, or delete that output to replace it"
    )
