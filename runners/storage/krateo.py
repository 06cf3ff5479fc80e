"""`krateo`: Krateo's `api` + `endpointRef` storage, in the shapes Krateo's endpoints expect.

Why these shapes: the endpoint is usually Krateo's finops-database-handler, which runs a
notebook with the request body as its command line, `key + '=' + value` per key, so any value
that is not a string makes it answer 500. Krateo's runners (kserve-controller's
`StoreOutputData`) therefore send one JSON object of strings, with the predictions JSON-encoded.

The endpoint is a Secret the controller mounts at `<secretsDir>/<endpointRef.name>/`
with keys `server-url`, and optionally `token` (Bearer), `username`/`password`
(basic auth) and `certificate-authority-data` (PEM, or base64 of PEM as in a
kubeconfig; checked to be a CA bundle up front, and a server certificate it does not
verify is a ConfigError, exit 2). `endpointRef.namespace` is the controller's business
(it only mounts Secrets of the run's namespace); the runner ignores it.

Input: `verb` to `server-url + path` with the `headers` ('Name: value' strings) and as the
JSON body the run parameters merged with `payload` (a JSON object; its keys win), since
Krateo always sends the parameters. Records are the response's `result` field or the
response itself when it is a list (a `result` holding a JSON string is decoded too). The API
answers in one response, so a resumed run skips the committed records client-side.

Output, one request per chunk with at least one record (every chunk with `committedPath`, see
below): `verb` to `server-url + path` with a
JSON object whose values are all strings: the run parameters, then `job_uid` (the run UID),
`pod_uid` (env `POD_UID`) and `predictions` (the chunk's prediction values,
JSON-encoded, in record order) as Krateo's runners send them, plus `ids` (the records' ids,
JSON-encoded, same order), `job_name` and `chunk` (the chunk index) so that a receiver can
de-duplicate by (job_uid, job_name, chunk); the header `Idempotency-Key:
<runUid>-<jobName>-<chunk>` says the same. Our keys win over parameters of the same name.
There is no completion request (Krateo sends none, and a notebook would take it for more
predictions): the run's status says when it is complete.

Resume: with `committedPath` set, the sink asks that path of the endpoint (a notebook that
reads what the output notebook stored) which chunks it holds: `verb` with the run parameters,
`job_uid`, `job_name` and `role` (strings, like every body), answered with `result`, a list of
`{"chunk": n, "records": n}` (or of indexes; JSON text is decoded, as for input; see
runners/storage/receipts.py), and a restarted pod resumes after them; so that it can say so
for every chunk, such an endpoint also gets the chunks that hold no record (`predictions` and
`ids` are then `[]`). Without it the endpoint cannot be asked, a chunk with no record sends no
request, and a restarted pod sends its chunks again from chunk 0.

Failed records: an explicit `errors: {krateo: ...}` storage gets the same body with `errors`
(JSON-encoded `{id, position, input, reason}` objects) instead of `predictions` and `ids`.
Without one they are never posted to the output endpoint (its notebook would store them as
predictions): `error_settings` sends them to the pod log, one JSON line per record on stderr,
`{"failedRecord": id, "position": n, "chunk": n, "reason": "..."}`, and the run's summary
names "pod log" as its error output. A pod log cannot be asked what it holds either: a chunk
that a restarted pod redoes logs its failures again.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys
import tempfile
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import requests

from contracts.storage import KrateoStorage
from runners.api import (
    ConfigError,
    ErrorRecord,
    InputRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
)
from runners.formats import jsonable, output_row, record_id
from runners.httpio import checked_secret_url, json_body, new_session, send
from runners.netguard import Guard
from runners.redact import remember
from runners.storage.receipts import held_chunks
from runners.tls import check_pem

_TIMEOUT = 300.0
_TLS_HINT = "put the CA that signed it in the endpoint Secret's key certificate-authority-data"


class KrateoBackend(StorageBackend):
    """StorageBackend for kind `krateo`."""

    def open_source(self, settings: KrateoStorage, ctx: RunContext) -> KrateoSource:
        """A source reading the records of one API call."""
        return KrateoSource(settings, ctx)

    def open_sink(
        self, settings: KrateoStorage | PodLog, ctx: RunContext, *, role: str
    ) -> KrateoSink | PodLogSink:
        """A sink sending predictions per chunk, or the pod log for `error_settings`."""
        if isinstance(settings, PodLog):
            return PodLogSink()
        return KrateoSink(settings, ctx, role=role)

    def error_settings(self, settings: KrateoStorage) -> PodLog:
        """The default error output: the pod log, never the output endpoint (see module doc)."""
        return PodLog()


class Endpoint:
    """The endpoint Secret's contents and a session configured from them."""

    def __init__(self, settings: KrateoStorage, ctx: RunContext) -> None:
        self.api = settings.api
        self.dir = Path(ctx.secrets_dir) / self.api.endpoint_ref.name
        server = self._key("server-url")
        if server is None:
            raise ConfigError(
                f"api.endpointRef: Secret {self.api.endpoint_ref.name!r} key 'server-url' is not "
                f"mounted at {self.dir}; create the endpoint Secret in the run's namespace"
            )
        name = self.api.endpoint_ref.name
        where = f"api.endpointRef: Secret {name!r} key 'server-url'"
        hint = "put them in the Secret's keys username and password (or token)"
        self.server = checked_secret_url(server, field=where, hint=hint).rstrip("/")
        self.url = self.at(self.api.path)
        self._ca_file: str | None = None
        self.session = new_session(
            self._headers(),
            verify=self._verify(),
            origins=[self.server],
            field="api.endpointRef server-url",
            guard=Guard.of(ctx),
        )
        username, password = self._key("username"), self._key("password")
        if username is not None and password is not None:
            self.session.auth = (username, password)

    def at(self, path: str) -> str:
        """The URL of `path` on the endpoint's server."""
        return self.server + "/" + path.lstrip("/")

    def _key(self, key: str) -> str | None:
        path = self.dir / key
        # A Secret's value: never shown (runners/redact.py); server-url least of all.
        return remember(path.read_text().strip()) if path.is_file() else None

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for line in self.api.headers:
            name, sep, value = line.partition(":")
            if not sep or not name.strip():
                raise ConfigError(f"api.headers: {line!r} is not 'Name: value'")
            headers[name.strip()] = value.strip()
        token = self._key("token")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def _verify(self) -> bool | str:
        pem = self._key("certificate-authority-data")
        if not pem:
            return True
        if "-----BEGIN" not in pem:
            try:
                pem = base64.b64decode(pem, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                raise ConfigError(
                    "api.endpointRef: certificate-authority-data is not PEM"
                ) from None
        check_pem(field="api.endpointRef", what="certificate-authority-data", cadata=pem)
        fd, self._ca_file = tempfile.mkstemp(prefix="krateo-ca-", suffix=".pem")
        with os.fdopen(fd, "w") as handle:
            handle.write(pem)
        return self._ca_file

    def call(
        self,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        path: str | None = None,
        field: str = "api.path",
        quote: bool = True,
    ) -> requests.Response:
        """One request with the API's verb to the API's URL (or to `path` of the endpoint);
        `quote=False` when it carries records (runners/httpio.py)."""
        data = body if isinstance(body, str) else json.dumps(body, default=jsonable)
        return send(
            self.session,
            self.api.verb,
            self.url if path is None else self.at(path),
            field=field,
            timeout=_TIMEOUT,
            tls_hint=_TLS_HINT,
            data=data.encode(),
            headers=headers,
            quote=quote,
        )

    def close(self) -> None:
        """Close the session and remove the CA file."""
        self.session.close()
        if self._ca_file is not None:
            Path(self._ca_file).unlink(missing_ok=True)


class KrateoSource(Source):
    """The records returned by one call of the endpoint."""

    def __init__(self, settings: KrateoStorage, ctx: RunContext) -> None:
        self.body = {**ctx.parameters, **_payload(settings.api.payload)}
        self.endpoint = Endpoint(settings, ctx)

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        """Records with position >= skip."""
        rows = _rows(json_body(self.endpoint.call(self.body), field="api.path"))
        for position, row in enumerate(rows):
            if position >= skip:
                data = row if isinstance(row, dict) else {"value": row}
                yield InputRecord(position, record_id(data, position, id_field=None), data)

    def total(self) -> int | None:
        """Unknown before the call."""
        return None

    def close(self) -> None:
        """Close the endpoint's session."""
        self.endpoint.close()


def _payload(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise ConfigError("api.payload: must be a JSON object (it is merged with the parameters)")
    return payload


def _rows(payload: Any) -> list[Any]:
    found = _result(payload)
    if isinstance(found, list):
        return found
    raise ConfigError("api.path: the response is neither a list nor an object with a list `result`")


def _result(payload: Any) -> Any:
    """A notebook's answer: its `result` (JSON text decoded), or the answer itself."""
    found = payload.get("result") if isinstance(payload, dict) else payload
    if isinstance(found, str):
        try:
            return json.loads(found)
        except ValueError:
            return None
    return found


class KrateoSink(Sink):
    """One string-valued request per chunk, merged with the run parameters (see module doc)."""

    def __init__(self, settings: KrateoStorage, ctx: RunContext, *, role: str) -> None:
        self.endpoint = Endpoint(settings, ctx)
        self.committed_path = settings.committed_path
        self.ctx = ctx
        self.role = role
        self.location = f"krateo endpoint {settings.api.endpoint_ref.name}: {settings.api.path}"
        self.pod_uid = os.environ.get("POD_UID", "")

    def committed(self) -> set[int]:
        """The chunks `committedPath` says the endpoint holds, else none (see module doc)."""
        return set(self._held())

    def committed_records(self, chunks: set[int]) -> int:
        """Records the endpoint holds in `chunks`, as `committedPath` says (else 0)."""
        return sum(count for chunk, count in self._held().items() if chunk in chunks)

    def _held(self) -> dict[int, int]:
        if self.committed_path is None:
            return {}
        body = {
            **self.ctx.parameters,
            "job_uid": self.ctx.run_uid,
            "job_name": self.ctx.job_name,
            "role": self.role,
        }
        field = "committedPath"
        response = self.endpoint.call(body, path=self.committed_path, field=field)
        return held_chunks(_result(json_body(response, field=field)), field=field)

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """Send one chunk of predictions (or failures, for the error role). An empty chunk is
        sent only to an endpoint that can say what it holds (`committedPath`): it is how that
        endpoint learns the chunk is done."""
        if not records and self.committed_path is None:
            return
        if self.role == "errors":
            fields = {"errors": _json([output_row(r) for r in records])}
        else:
            fields = {
                "predictions": _json([_prediction(r) for r in records]),
                "ids": _json([r.id for r in records]),
            }
        body = {
            **self.ctx.parameters,
            "job_uid": self.ctx.run_uid,
            "pod_uid": self.pod_uid,
            "job_name": self.ctx.job_name,
            "chunk": str(index),
            **fields,
        }
        suffix = "-errors" if self.role == "errors" else ""
        key = f"{self.ctx.run_uid}-{self.ctx.job_name}-{index}{suffix}"
        self.endpoint.call(body, headers={"Idempotency-Key": key}, quote=False).close()

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Nothing to send: Krateo has no completion request (see module doc)."""

    def close(self) -> None:
        """Close the endpoint's session."""
        self.endpoint.close()


def _prediction(record: OutputRecord | ErrorRecord) -> Any:
    return record.prediction if isinstance(record, OutputRecord) else None


def _json(value: Any) -> str:
    """`value` as compact JSON text; raises TypeError/ValueError before anything is sent."""
    return json.dumps(value, default=jsonable, allow_nan=False, separators=(",", ":"))


class PodLog:
    """Settings of the default error output: the pod log (see module doc)."""


class PodLogSink(Sink):
    """Failed records as one JSON line each on stderr, the pod's log."""

    location = "pod log"

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream

    def committed(self) -> set[int]:
        """Nothing to discover: the error chunk is always rewritten anyway."""
        return set()

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """One line per failed record."""
        out = self.stream or sys.stderr
        for r in records:
            reason = r.reason if isinstance(r, ErrorRecord) else ""
            line = {"failedRecord": r.id, "position": r.position, "chunk": index, "reason": reason}
            out.write(json.dumps(line) + "\n")
        out.flush()

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Nothing to mark."""

    def close(self) -> None:
        """Nothing to close."""
