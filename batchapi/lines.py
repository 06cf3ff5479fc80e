"""The check of an uploaded batch file, line by line, while it streams in.

OpenAI validates a batch's input file before it runs and, when a line breaks a rule, fails the
whole batch with `errors.data`: one `{code, message, param, line}` per bad line. The same rules
are checked here during the upload (the bytes pass through once, nothing is held but the line
being read and a 16-byte digest per `custom_id`, for at most `max_requests` lines), and what
is found is kept with the file; creating a
batch then adds the rules that need the batch's `endpoint` (`url_mismatch`) and its one model
(`model_mismatch`) from the urls and models the file names.

The runner (runners/models/openai_batch.py) is laxer and fails single lines instead; a batch
created here never reaches it with a bad line, so a client sees OpenAI's behaviour. Lines are
numbered from 1 as in an editor; blank lines are skipped (the runner skips them too) but
counted in the numbering.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

URLS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MAX_CUSTOM_ID = 255  # the runner's rule for every record id (docs/contract.md)
MAX_LINE_BYTES = 16 * 1024 * 1024  # a line longer than this is not parsed (bounded memory)
KEPT_ERRORS = 1000  # errors kept with a file; the count goes on
KEPT_NAMES = 64  # distinct urls / models remembered (more are an error anyway)


@dataclass
class LineError:
    """One finding, as OpenAI's `BatchError` (`line` from 1)."""

    code: str
    message: str
    line: int | None = None
    param: str | None = None

    def wire(self) -> dict[str, Any]:
        """The JSON object of `errors.data`."""
        return {"code": self.code, "message": self.message, "param": self.param, "line": self.line}


@dataclass
class FileCheck:
    """What the check found in a whole file."""

    requests: int = 0
    errors: list[LineError] = field(default_factory=list)
    error_count: int = 0
    urls: dict[str, int] = field(default_factory=dict)  # url -> first line naming it
    models: dict[str, int] = field(default_factory=dict)  # body.model -> first line

    def wire(self) -> dict[str, Any]:
        """Stored with the file (its metadata)."""
        return {
            "requests": self.requests,
            "errors": [e.wire() for e in self.errors],
            "errorCount": self.error_count,
            "urls": self.urls,
            "models": self.models,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> FileCheck:
        """Read back what `wire` stored."""
        errors = [
            LineError(str(e.get("code")), str(e.get("message")), e.get("line"), e.get("param"))
            for e in data.get("errors") or []
        ]
        return cls(
            requests=int(data.get("requests") or 0),
            errors=errors,
            error_count=int(data.get("errorCount") or 0),
            urls={str(k): int(v) for k, v in (data.get("urls") or {}).items()},
            models={str(k): int(v) for k, v in (data.get("models") or {}).items()},
        )


class LineChecker:
    """Feed the file's bytes in any pieces; `finish()` gives the FileCheck."""

    def __init__(self, *, max_requests: int) -> None:
        self.max_requests = max_requests
        self.check = FileCheck()
        self._pending = bytearray()
        self._skipping = False  # inside a line longer than MAX_LINE_BYTES
        self._number = 0
        self._seen: set[bytes] = set()  # digests of custom_ids

    def feed(self, data: bytes) -> None:
        """Check every line the data completes."""
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                self._hold(data[start:])
                return
            self._hold(data[start:end])
            self._end_line()
            start = end + 1

    def finish(self) -> FileCheck:
        """The last line (without a newline) too, and the result."""
        if self._pending or self._skipping:
            self._end_line()
        if self.check.requests == 0 and not self.check.error_count:
            self._error(LineError("empty_file", "The file holds no request lines.", None))
        return self.check

    def _hold(self, piece: bytes) -> None:
        if self._skipping:
            return
        if len(self._pending) + len(piece) > MAX_LINE_BYTES:
            self._skipping = True
            self._pending.clear()
            return
        self._pending += piece

    def _end_line(self) -> None:
        self._number += 1
        if self._skipping:
            self._skipping = False
            message = f"This line is longer than {MAX_LINE_BYTES} bytes."
            self._error(LineError("line_too_long", message, self._number))
            return
        raw = bytes(self._pending)
        self._pending.clear()
        if raw.strip():
            self._line(raw, self._number)

    def _line(self, raw: bytes, number: int) -> None:
        self.check.requests += 1
        if self.check.requests == self.max_requests + 1:
            message = f"The file holds more than {self.max_requests} requests."
            self._error(LineError("too_many_tasks", message, number))
            self._seen = set()  # the file is refused anyway: memory stays bounded
        seen = self._seen if self.check.requests <= self.max_requests else set()
        problem = line_problem(raw, number, seen=seen)
        if problem is not None:
            self._error(problem)
            return
        request = json.loads(raw)
        self._remember(self.check.urls, request["url"], number)
        self._remember(self.check.models, request["body"]["model"], number)

    def _remember(self, names: dict[str, int], name: str, number: int) -> None:
        if name not in names and len(names) < KEPT_NAMES:
            names[name] = number

    def _error(self, error: LineError) -> None:
        self.check.error_count += 1
        if len(self.check.errors) < KEPT_ERRORS:
            self.check.errors.append(error)


def line_problem(raw: bytes, number: int, *, seen: set[bytes]) -> LineError | None:
    """The first rule one request line breaks, None for a good line (its id joins `seen`)."""
    try:
        request = json.loads(raw)
    except ValueError:
        request = None
    if not isinstance(request, dict):
        return LineError("invalid_json_line", "This line is not a JSON object.", number)
    for key in ("custom_id", "method", "url", "body"):
        if key not in request:
            message = f"Missing required parameter: '{key}'."
            return LineError("missing_required_parameter", message, number, key)
    return _field_problem(request, number) or _duplicate(request["custom_id"], number, seen)


def _field_problem(request: dict[str, Any], number: int) -> LineError | None:
    custom_id, body = request["custom_id"], request["body"]
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        message = f"custom_id must be a non-empty string of at most {MAX_CUSTOM_ID} characters."
        return LineError("invalid_custom_id", message, number, "custom_id")
    if request["method"] != "POST":
        return LineError("invalid_method", "method must be POST.", number, "method")
    if request["url"] not in URLS:
        message = "url must be one of " + ", ".join(URLS) + "."
        return LineError("invalid_url", message, number, "url")
    if not isinstance(body, dict):
        return LineError("invalid_body", "body must be a JSON object.", number, "body")
    if body.get("stream"):
        message = "body.stream is not supported in a batch."
        return LineError("invalid_body", message, number, "body.stream")
    if not isinstance(body.get("model"), str) or not body["model"]:
        message = "Missing required parameter: 'body.model'."
        return LineError("missing_required_parameter", message, number, "body.model")
    return None


def _duplicate(custom_id: str, number: int, seen: set[bytes]) -> LineError | None:
    digest = hashlib.blake2b(custom_id.encode(), digest_size=16).digest()
    if digest in seen:
        message = "The custom_id of this line is also the custom_id of an earlier line."
        return LineError("duplicate_custom_id", message, number, "custom_id")
    seen.add(digest)
    return None


def batch_errors(check: FileCheck, *, endpoint: str) -> list[LineError]:
    """The file's errors plus those that need the batch: every url must be the endpoint, and
    every line must name one model (the first one named)."""
    errors = list(check.errors)
    for url, number in sorted(check.urls.items(), key=lambda item: item[1]):
        if url != endpoint:
            message = f"The url of this line ({url}) is not the batch's endpoint ({endpoint})."
            errors.append(LineError("url_mismatch", message, number, "url"))
    models = sorted(check.models.items(), key=lambda item: item[1])
    for model, number in models[1:]:
        message = (
            f"This line's body.model ({model}) is not the model of the batch's first line "
            f"({models[0][0]}); a batch runs one model."
        )
        errors.append(LineError("model_mismatch", message, number, "body.model"))
    return sorted(errors, key=lambda e: e.line or 0)
