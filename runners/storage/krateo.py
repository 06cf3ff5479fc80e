"""`krateo`: Krateo's `api` + `endpointRef` storage, as Krateo's runners use it.

The endpoint is a Secret the controller mounts at `<secretsDir>/<endpointRef.name>/`
with keys `server-url`, and optionally `token` (Bearer), `username`/`password`
(basic auth) and `certificate-authority-data` (PEM, or base64 of PEM as in a
kubeconfig). `endpointRef.namespace` is the controller's business (it only
mounts Secrets of the run's namespace); the runner ignores it.

Input: `verb` to `server-url + path` with the `headers` ('Name: value' strings)
and the run parameters as the JSON body (or `payload` when set); records are the
response's `result` field or the response itself when it is a list (a `result`
holding a JSON string is decoded too). The API answers in one response, so a
resumed run skips the committed records client-side.

Output, as Krateo's runners do it: `verb` to `server-url + path` with the run
parameters plus `jobId`, `jobName`, `chunk` and `predictions` (one object per
record: id, position, input, prediction) as JSON, and `Idempotency-Key:
<runUid>-<jobName>-<chunk>`. Like any HTTP receiver, the endpoint must
de-duplicate by (jobId, jobName, chunk); `committed()` cannot ask it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import requests

from contracts.storage import KrateoStorage
from runners.api import ConfigError, ErrorRecord, InputRecord, OutputRecord, RunContext
from runners.formats import jsonable, output_row, record_id
from runners.httpio import json_body, new_session, send

_TIMEOUT = 300.0


class KrateoBackend:
    """StorageBackend for kind `krateo`."""

    def open_source(self, settings: KrateoStorage, ctx: RunContext) -> KrateoSource:
        """A source reading the records of one API call."""
        return KrateoSource(settings, ctx)

    def open_sink(self, settings: KrateoStorage, ctx: RunContext, *, role: str) -> KrateoSink:
        """A sink POSTing predictions per chunk."""
        return KrateoSink(settings, ctx, role=role)


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
        self.url = server.rstrip("/") + "/" + self.api.path.lstrip("/")
        self._ca_file: str | None = None
        self.session = new_session(self._headers(), verify=self._verify())
        username, password = self._key("username"), self._key("password")
        if username is not None and password is not None:
            self.session.auth = (username, password)

    def _key(self, key: str) -> str | None:
        path = self.dir / key
        return path.read_text().strip() if path.is_file() else None

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
        fd, self._ca_file = tempfile.mkstemp(prefix="krateo-ca-", suffix=".pem")
        with os.fdopen(fd, "w") as handle:
            handle.write(pem)
        return self._ca_file

    def call(self, body: Any, *, headers: dict[str, str] | None = None) -> requests.Response:
        """One request with the API's verb to the API's URL."""
        data = body if isinstance(body, str) else json.dumps(body, default=jsonable)
        return send(
            self.session,
            self.api.verb,
            self.url,
            field="api.path",
            timeout=_TIMEOUT,
            data=data.encode(),
            headers=headers,
        )

    def close(self) -> None:
        """Close the session and remove the CA file."""
        self.session.close()
        if self._ca_file is not None:
            Path(self._ca_file).unlink(missing_ok=True)


class KrateoSource:
    """The records returned by one call of the endpoint."""

    def __init__(self, settings: KrateoStorage, ctx: RunContext) -> None:
        self.endpoint = Endpoint(settings, ctx)
        self.ctx = ctx
        self.payload = settings.api.payload

    def records(self, skip: int) -> Iterator[InputRecord]:
        """Records with position >= skip."""
        body = self.payload if self.payload is not None else dict(self.ctx.parameters)
        rows = _rows(json_body(self.endpoint.call(body), field="api.path"))
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


def _rows(payload: Any) -> list[Any]:
    found = payload.get("result") if isinstance(payload, dict) else payload
    if isinstance(found, str):
        try:
            found = json.loads(found)
        except ValueError:
            found = None
    if isinstance(found, list):
        return found
    raise ConfigError("api.path: the response is neither a list nor an object with a list `result`")


class KrateoSink:
    """Predictions POSTed per chunk, merged with the run parameters."""

    def __init__(self, settings: KrateoStorage, ctx: RunContext, *, role: str) -> None:
        self.endpoint = Endpoint(settings, ctx)
        self.ctx = ctx
        self.role = role
        self.location = self.endpoint.url

    def committed(self) -> set[int]:
        """Always empty: the endpoint cannot be asked (see module doc)."""
        return set()

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """POST one chunk of predictions (or failures, for the error role)."""
        key = "errors" if self.role == "errors" else "predictions"
        self._post(index, {"chunk": index, key: [output_row(r) for r in records]})

    def finish(self, summary: Mapping[str, Any]) -> None:
        """POST the completion manifest."""
        self._post("complete", {"complete": True, "summary": dict(summary)})

    def _post(self, chunk: int | str, extra: dict[str, Any]) -> None:
        body = {
            **self.ctx.parameters,
            "jobId": self.ctx.run_uid,
            "jobName": self.ctx.job_name,
            **extra,
        }
        suffix = "-errors" if self.role == "errors" else ""
        key = f"{self.ctx.run_uid}-{self.ctx.job_name}-{chunk}{suffix}"
        self.endpoint.call(body, headers={"Idempotency-Key": key}).close()

    def close(self) -> None:
        """Close the endpoint's session."""
        self.endpoint.close()
