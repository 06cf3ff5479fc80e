"""A batch object (OpenAI's `Batch`) read from its InferenceRun: status, counts, times, files.

| run | batch status |
| --- | --- |
| created with validation errors (annotation, `spec.cancel`) | `failed`, with `errors` |
| no phase yet, `Pending` (config resolving, a deployment coming up, queued) | `validating` |
| `Running`, `Suspended` | `in_progress` |
| `spec.cancel` set, not finished | `cancelling` |
| finished, its output or error file not yet recorded | `finalizing` |
| `Succeeded` | `completed` |
| `Failed`: the Job's deadline passed (`DeadlineExceeded`, the completion window) | `expired` |
| `Failed` otherwise | `failed`, `errors` holding the run's message |
| `Cancelled` | `cancelled` |

`request_counts` come from the run's status while it runs (the runner's last progress report,
`status.progress`); once it finished, from the lines of its output and error files, the
exact count of what it committed (a cancelled run's `status.result` may be the last progress
report, older than its last chunk). `total` is the request count the upload's check found. A
run keeps its committed chunks when cancelled, expired or failed, so those batches have output
and error files too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from batchapi.manifests import CANCELLING_AT, batch_of
from controller.core.status import FINISHED

Obj = dict[str, Any]
DEADLINE_REASON = "DeadlineExceeded"


def run_phase(run: Obj) -> str:
    """The run's phase ("" before the controller wrote one)."""
    return str((run.get("status") or {}).get("phase") or "")


def is_finished(run: Obj) -> bool:
    """True once the run reached a final phase (or never runs: validation failed)."""
    return run_phase(run) in FINISHED or bool(batch_of(run).errors)


def counts(run: Obj) -> tuple[int, int]:
    """(completed, failed) requests so far, from the run's status."""
    status = run.get("status") or {}
    source = status.get("result") or status.get("progress") or {}
    return int(source.get("recordsWritten") or 0), int(source.get("recordsFailed") or 0)


def batch_status(run: Obj, *, recorded: bool) -> str:
    """OpenAI's status of the batch (module table); `recorded`: its files are."""
    if batch_of(run).errors:
        return "failed"
    phase = run_phase(run)
    if phase in FINISHED and not recorded:
        return "finalizing"
    if phase == "Succeeded":
        return "completed"
    if phase == "Cancelled":
        return "cancelled"
    if phase == "Failed":
        return "expired" if _failed_reason(run) == DEADLINE_REASON else "failed"
    if (run.get("spec") or {}).get("cancel"):
        return "cancelling"
    return "in_progress" if phase in ("Running", "Suspended") else "validating"


def batch_object(run: Obj, *, lines: dict[str, int] | None) -> Obj:
    """The Batch object. `lines`: for a finished run whose files are recorded, the request
    lines of each (`output`, `errors`) that has any; they are the counts then."""
    batch = batch_of(run)
    status = run.get("status") or {}
    state = batch_status(run, recorded=lines is not None)
    created = _epoch(run.get("metadata", {}).get("creationTimestamp")) or 0
    done = _epoch(status.get("completionTime"))
    completed, failed = (
        counts(run) if lines is None else (lines.get("output", 0), lines.get("errors", 0))
    )
    files = lines or {}
    return {
        "id": batch.batch_id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "model": batch.model or None,
        "errors": _errors(run, state),
        "input_file_id": batch.input_file_id,
        "completion_window": batch.completion_window,
        "status": state,
        "output_file_id": batch.output_file_id if "output" in files else None,
        "error_file_id": batch.error_file_id if "errors" in files else None,
        "created_at": created,
        "in_progress_at": _epoch(status.get("startTime")),
        "expires_at": created + batch.timeout_seconds,
        "finalizing_at": done if not batch.errors else None,
        "completed_at": done if state == "completed" else None,
        "failed_at": (done or created) if state == "failed" else None,
        "expired_at": done if state == "expired" else None,
        "cancelling_at": _cancelling_at(run),
        "cancelled_at": done if state == "cancelled" else None,
        "request_counts": {"total": batch.requests, "completed": completed, "failed": failed},
        "usage": _usage(status.get("result") or {}),
        "metadata": batch.metadata,
    }


def _errors(run: Obj, state: str) -> Obj | None:
    errors = batch_of(run).errors
    if not errors and state == "failed":
        message = (run.get("status") or {}).get("message") or "the batch's run failed"
        errors = [{"code": "batch_failed", "message": message, "param": None, "line": None}]
    return {"object": "list", "data": errors} if errors else None


def _failed_reason(run: Obj) -> str:
    for condition in (run.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return str(condition.get("reason") or "")
    return ""


def _cancelling_at(run: Obj) -> int | None:
    text = ((run.get("metadata") or {}).get("annotations") or {}).get(CANCELLING_AT)
    return int(text) if text and text.isdigit() else None


def _usage(result: Obj) -> Obj | None:
    if result.get("totalTokens") is None:
        return None
    prompt, completion = (
        int(result.get("promptTokens") or 0),
        int(result.get("completionTokens") or 0),
    )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(result["totalTokens"]),
    }


def _epoch(text: Any) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp())
