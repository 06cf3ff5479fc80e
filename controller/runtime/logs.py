"""Structured logs: one JSON object per line, carrying the run key and a reconcile id.

Every line logged while a run is reconciled says which run and which pass, so
`kubectl logs | jq 'select(.run=="ns/name")'` tells one run's story across
workers and restarts. The context lives in contextvars (per thread), not globals.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("run", default=None)
_RECONCILE: contextvars.ContextVar[str | None] = contextvars.ContextVar("reconcile", default=None)
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


@contextlib.contextmanager
def reconcile_context(key: str) -> Iterator[str]:
    """Tag log lines inside the block with `run=key` and a fresh reconcile id."""
    reconcile_id = uuid.uuid4().hex[:12]
    run_token, id_token = _RUN.set(key), _RECONCILE.set(reconcile_id)
    try:
        yield reconcile_id
    finally:
        _RUN.reset(run_token)
        _RECONCILE.reset(id_token)


class ContextFilter(logging.Filter):
    """Copies the reconcile context onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.run = _RUN.get()
        record.reconcile_id = _RECONCILE.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, context, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and value is not None:
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, sort_keys=False)


def configure(*, level: str, fmt: str) -> None:
    """Install the root handler: JSON (default) or plain text."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(run)s] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kubernetes.leaderelection logs every lease renewal (each retry period) at INFO: only
    # at DEBUG is that worth reading; our manager logs the transitions that matter.
    quiet = logging.DEBUG if logging.getLevelName(level) == logging.DEBUG else logging.WARNING
    logging.getLogger("leaderelection").setLevel(quiet)
