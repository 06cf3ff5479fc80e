"""Keeping Secret values out of everything the runner shows: its log, its summary, its reasons.

Why one registry for the execution rather than care at each message: a Secret's value
reaches text in ways no single call site sees. Krateo's `server-url` is a whole URL that
ends up in every request's error message and was the output's `location`; an SQL URL
with its password shows in SQLAlchemy's "could not parse" error and in tracebacks; a
model server may echo the API key it refused. So every value read from a mounted Secret
(`runners.secrets.read_secret`, Krateo's endpoint keys) is remembered here, and the places
where text leaves the process replace it with `***`:

- the summary written to the termination message, which the controller copies to
  `status.result` (reason, output, error output): `redact_result`;
- stdout and stderr, so every log line, retry message and traceback: `redacting` wraps
  both for the execution, a line at a time (a value split across two writes of one line
  is still found);
- the reasons of failed records, before they reach an error output: `redact`.

What is registered: the value as read (stripped), without a trailing `/`, as it appears
inside JSON text, and a URL's password, decoded and as written. Values shorter than
MIN_LENGTH characters are not (a two-letter user name would blank every word that holds
it): such a value protects nothing anyway. A host name on its own is not registered:
messages name the host they could not reach, which is needed to fix anything.

The registry lives for one execution (`redacting`, entered by runners/cli.py) and is the
process's: the text it guards (stdout, stderr, the termination message) is the process's
too, and plug-in backends that read Secrets with `read_secret` join it without being
handed anything. Outside an execution nothing is registered and nothing is redacted.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast
from urllib.parse import unquote, urlsplit

from contracts.run import RunResult

MASK = "***"
MIN_LENGTH = 4


class Redactor:
    """The Secret values of one execution, and `redact` to blank them out of a text."""

    def __init__(self) -> None:
        self._values: tuple[str, ...] = ()  # longest first, so a value inside another goes too
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        """Remember `value` (and the forms it takes in text, see module doc)."""
        forms = {f for f in _forms(value) if len(f) >= MIN_LENGTH}
        with self._lock:
            known = set(self._values) | forms
            self._values = tuple(sorted(known, key=len, reverse=True))

    def redact(self, text: str) -> str:
        """`text` with every remembered value replaced by `***`."""
        for value in self._values:
            if value in text:
                text = text.replace(value, MASK)
        return text


def _forms(value: str) -> set[str]:
    forms = {value, value.rstrip("/"), json.dumps(value)[1:-1]}
    try:
        password = urlsplit(value).password if "://" in value else None
    except ValueError:
        password = None
    if password:
        forms |= {password, unquote(password)}
    return forms


_active: Redactor | None = None  # the execution's (see module doc)


def remember(value: str) -> str:
    """Register `value`, read from a Secret, with the execution's redactor; returns it."""
    if _active is not None:
        _active.add(value)
    return value


def redact(text: str) -> str:
    """`text` without the execution's Secret values (as is outside an execution)."""
    return _active.redact(text) if _active is not None else text


def redact_value(value: Any) -> Any:
    """A JSON value (a server's answer) without the execution's Secret values in its texts."""
    if _active is None:
        return value
    text = json.dumps(value)
    clean = _active.redact(text)
    return value if clean == text else json.loads(clean)


def redact_result(result: RunResult) -> RunResult:
    """The summary with Secret values blanked out of its texts."""
    texts = {"reason": result.reason, "output": result.output}
    texts["error_output"] = result.error_output
    update = {k: redact(v) for k, v in texts.items() if v is not None and redact(v) != v}
    return result.model_copy(update=update) if update else result


@contextmanager
def redacting() -> Iterator[Redactor]:
    """One execution: a fresh registry, and stdout and stderr written through it."""
    global _active
    redactor = Redactor()
    saved = _active, sys.stdout, sys.stderr
    _active = redactor
    sys.stdout = cast(TextIO, RedactingStream(sys.stdout, redactor))
    sys.stderr = cast(TextIO, RedactingStream(sys.stderr, redactor))
    try:
        yield redactor
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _active, sys.stdout, sys.stderr = saved


class RedactingStream:
    """A text stream that passes whole lines of text through a Redactor to `inner`.

    A line is held until its newline (or a flush), so a value written in pieces within one
    line is still found. Anything else (`fileno`, `encoding`, ...) is the inner stream's.
    """

    def __init__(self, inner: TextIO, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor
        self._pending = ""
        # Reentrant: the SIGTERM handler prints from the main thread, maybe inside a write.
        self._lock = threading.RLock()

    def write(self, text: str) -> int:
        """Hold `text`, and write out every complete line redacted."""
        with self._lock:
            self._pending += text
            head, newline, tail = self._pending.rpartition("\n")
            if newline:
                self._inner.write(self._redactor.redact(head + newline))
                self._pending = tail
        return len(text)

    def writelines(self, lines: Any) -> None:
        """`write` each line."""
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Write out what is held (redacted) and flush the inner stream."""
        with self._lock:
            if self._pending:
                self._inner.write(self._redactor.redact(self._pending))
                self._pending = ""
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
