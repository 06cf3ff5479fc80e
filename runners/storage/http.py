"""`http`: any JSON API, as input (with pagination) and as output (one POST per chunk).

Output payload, one request per chunk:
`{"jobId", "runUid", "jobName", "chunk", "role", "records": [...]}` with header
`Idempotency-Key: <runUid>-<jobName>-<chunk>` (`-errors` appended for the error
output). The completion manifest is one more request with `"complete": true`
and key `<runUid>-<jobName>-complete`.

A generic HTTP API cannot be listed. With `committedUrl` set, the sink asks the
receiver which chunks it holds (GET with jobId, jobName and role; see
runners/storage/receipts.py) and a restarted pod resumes after them. Without it
`committed()` is empty and a restarted pod sends its chunks again. Either way a
receiver MUST de-duplicate by (jobId, jobName, chunk), e.g. by upserting on that
key or honouring Idempotency-Key: a pod killed after the receiver stored a chunk
and before the runner learnt it sends that chunk again. That is what makes HTTP
output exactly-once; the bodies carry the run UID and Job name, so runs share a
receiver side by side.

TLS: `tls.caSecretRef` names a mounted CA bundle, checked when the backend opens; a
server certificate it does not verify stops the run with exit 2 (runners/httpio.py).

Input pagination: `page` (pages numbered from 1), `offset`, `cursor` (value at
`cursorPath`), `link` (URL at `nextPath` or the `Link: <...>; rel="next"`
header). Page and offset modes seek directly to the first uncommitted record.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

import requests

from contracts.storage import HttpPagination, HttpStorage
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
from runners.httpio import dig, json_body, new_session, send
from runners.netguard import Guard
from runners.secrets import read_secret
from runners.storage.receipts import held_chunks
from runners.tls import verify

TLS_HINT = "set tls.caSecretRef to the CA that signed it"


class HttpBackend(StorageBackend):
    """StorageBackend for kind `http`."""

    def open_source(self, settings: HttpStorage, ctx: RunContext) -> HttpSource:
        """A (paginated) JSON API source."""
        return HttpSource(settings, ctx)

    def open_sink(self, settings: HttpStorage, ctx: RunContext, *, role: str) -> HttpSink:
        """A sink POSTing one request per chunk."""
        return HttpSink(settings, ctx, role=role)


def make_session(settings: HttpStorage, ctx: RunContext) -> requests.Session:
    """A session with the settings' headers, API key and TLS options, that sends only to the
    origins of `url` and `committedUrl` (runners/httpio.py) through the run's network guard."""
    headers = dict(settings.headers)
    if settings.auth is not None:
        ref = settings.auth.secret_ref
        key = read_secret(ctx, name=ref.name, key=ref.key, field="auth.secretRef")
        if settings.auth.header == "Authorization":
            headers["Authorization"] = f"Bearer {key}"
        else:
            headers["X-API-Key"] = key
    return new_session(
        headers,
        verify=verify(settings.tls, ctx, field="tls.caSecretRef"),
        origins=[u for u in (settings.url, settings.committed_url) if u],
        field="url",
        guard=Guard.of(ctx),
    )


class HttpSource(Source):
    """Records from a JSON API, page by page."""

    def __init__(self, settings: HttpStorage, ctx: RunContext) -> None:
        self.settings = settings
        self.ctx = ctx
        self.session = make_session(settings, ctx)
        self.method = settings.method or "GET"

    def _fetch(self, url: str, params: dict[str, Any]) -> requests.Response:
        body = None
        if self.method != "GET":
            body = {**(self.settings.body or {}), **self.ctx.parameters}
        return send(
            self.session,
            self.method,
            url,
            field="url",
            timeout=self.settings.timeout_seconds,
            tls_hint=TLS_HINT,
            params=params,
            json=body,
        )

    def _records_of(self, payload: Any) -> list[Any]:
        found = dig(payload, self.settings.records_path)
        if isinstance(found, list):
            return found
        where = self.settings.records_path or "the response"
        raise ConfigError(f"recordsPath: {where} is not a list of records")

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        """Records with position >= skip, fetching pages lazily."""
        position = None
        for start, rows in self._pages(skip):
            for offset, row in enumerate(rows):
                position = start + offset
                if position < skip:
                    continue
                data = row if isinstance(row, dict) else {"value": row}
                data = {k: jsonable(v) for k, v in data.items()}
                yield InputRecord(
                    position, record_id(data, position, id_field=self.settings.id_field), data
                )

    def _pages(self, skip: int) -> Iterator[tuple[int, list[Any]]]:
        pagination = self.settings.pagination
        if pagination is None:
            response = self._fetch(self.settings.url, {})
            yield 0, self._records_of(json_body(response, field="url"))
        elif pagination.mode in ("page", "offset"):
            yield from self._numbered_pages(pagination, skip)
        else:
            yield from self._linked_pages(pagination)

    def _numbered_pages(self, p: HttpPagination, skip: int) -> Iterator[tuple[int, list[Any]]]:
        start = skip if p.mode == "offset" else (skip // p.page_size) * p.page_size
        while True:
            params: dict[str, Any] = {p.size_param: p.page_size} if p.size_param else {}
            if p.mode == "offset":
                params[p.offset_param] = start
            else:
                params[p.page_param] = start // p.page_size + 1
            rows = self._records_of(json_body(self._fetch(self.settings.url, params), field="url"))
            if not rows:
                return
            yield start, rows
            if len(rows) < p.page_size:
                return
            start += len(rows)

    def _linked_pages(self, p: HttpPagination) -> Iterator[tuple[int, list[Any]]]:
        url: str | None = self.settings.url
        params: dict[str, Any] = {p.size_param: p.page_size} if p.size_param else {}
        start = 0
        while url:
            response = self._fetch(url, params)
            link = response.links.get("next", {}).get("url")
            payload = json_body(response, field="url")
            rows = self._records_of(payload)
            yield start, rows
            start += len(rows)
            if p.mode == "cursor":
                cursor = dig(payload, p.cursor_path)
                if not cursor or not rows:
                    return
                params = {**params, p.cursor_param: cursor}
            else:
                url = dig(payload, p.next_path) if p.next_path else link
                params = {}

    def total(self) -> int | None:
        """Unknown."""
        return None

    def close(self) -> None:
        """Close the session's connections."""
        self.session.close()


class HttpSink(Sink):
    """One request per chunk; the receiver de-duplicates by (jobId, jobName, chunk)."""

    def __init__(self, settings: HttpStorage, ctx: RunContext, *, role: str) -> None:
        self.settings = settings
        self.ctx = ctx
        self.role = role
        self.session = make_session(settings, ctx)
        self.location = settings.url

    def idempotency_key(self, chunk: int | str) -> str:
        """The Idempotency-Key of one request."""
        suffix = "-errors" if self.role == "errors" else ""
        return f"{self.ctx.run_uid}-{self.ctx.job_name}-{chunk}{suffix}"

    def committed(self) -> set[int]:
        """The chunks the receiver holds for this run (`committedUrl`), else none (module doc)."""
        return set(self._held())

    def committed_records(self, chunks: set[int]) -> int:
        """Records the receiver holds in `chunks`, as it says (0 without `committedUrl`)."""
        return sum(count for chunk, count in self._held().items() if chunk in chunks)

    def _held(self) -> dict[int, int]:
        url = self.settings.committed_url
        if url is None:
            return {}
        query = {"jobId": self.ctx.run_uid, "jobName": self.ctx.job_name, "role": self.role}
        response = send(
            self.session,
            "GET",
            url,
            field="committedUrl",
            timeout=self.settings.timeout_seconds,
            tls_hint=TLS_HINT,
            params=query,
        )
        answer = json_body(response, field="committedUrl")
        chunks = answer.get("chunks") if isinstance(answer, dict) else None
        return held_chunks(chunks, field="committedUrl")

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """POST chunk `index`."""
        self._post(index, {"chunk": index, "records": [output_row(r) for r in records]})

    def finish(self, summary: Mapping[str, Any]) -> None:
        """POST the completion manifest."""
        self._post("complete", {"complete": True, "summary": dict(summary)})

    def _post(self, key: int | str, extra: dict[str, Any]) -> None:
        payload = {
            "jobId": self.ctx.run_uid,
            "runUid": self.ctx.run_uid,
            "jobName": self.ctx.job_name,
            "role": self.role,
            **extra,
        }
        response = send(
            self.session,
            self.settings.method or "POST",
            self.settings.url,
            field="url",
            timeout=self.settings.timeout_seconds,
            tls_hint=TLS_HINT,
            json=payload,
            headers={"Idempotency-Key": self.idempotency_key(key)},
            quote=False,
        )
        response.close()

    def close(self) -> None:
        """Close the session's connections."""
        self.session.close()
