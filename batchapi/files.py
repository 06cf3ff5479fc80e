"""The Files API: upload (streamed and checked), list, retrieve, content, delete.

An upload's bytes go from the socket to the store in pieces while `LineChecker` reads them;
nothing holds the whole file. Over `max_file_bytes` the upload stops at once, what was
written is removed, and the answer is 413 (the server reads the rest of the body away first,
so that the client sees the answer instead of a broken connection). The file appears in the
store, and in lists, only when its metadata is written, after its content is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from batchapi.bodies import BodyReader, Multipart, Part
from batchapi.errors import ApiFailure, bad_request, no_file
from batchapi.ids import is_file_id, new_file_id
from batchapi.lines import LineChecker
from batchapi.settings import ApiSettings
from batchapi.store import FileMeta, FileStore, Upload

Obj = dict[str, Any]
MAX_FIELD_BYTES = 4096
EXPIRES_MIN, EXPIRES_MAX = 3600, 2_592_000  # OpenAI's bounds for expires_after.seconds
LIST_LIMIT_MAX = 10_000


class TooLarge(ApiFailure):
    """413: the upload is over the size limit (nothing of it is kept)."""


class Files:
    """The Files endpoints of one server, on a store."""

    def __init__(
        self, store: FileStore, settings: ApiSettings, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock

    def upload(self, namespace: str, body: BodyReader, content_type: str) -> Obj:
        """POST /v1/files: the File object of the stored upload."""
        form = Multipart(body, Multipart.boundary_of(content_type))
        now = int(self.clock())
        fields: dict[str, str] = {}
        pending: tuple[Upload, FileMeta] | None = None
        try:
            while (part := form.next_part()) is not None:
                if part.name != "file":
                    fields[part.name] = _small(form, part)
                elif pending is not None:
                    raise bad_request("Send one file per upload.", param="file")
                else:
                    pending = self._receive(namespace, form, part, now)
            if pending is None:
                raise bad_request("Missing required parameter: 'file'.", param="file")
            upload, meta = pending
            meta.purpose = _purpose(fields)
            meta.expires_at = _expires_at(fields, now)
            upload.commit()
        except BaseException:
            if pending is not None:
                pending[0].abort()
            raise
        self.store.put_meta(namespace, meta)
        return meta.openai()

    def _receive(
        self, namespace: str, form: Multipart, part: Part, now: int
    ) -> tuple[Upload, FileMeta]:
        file_id = new_file_id(now)
        upload = self.store.begin(namespace, file_id)
        checker = LineChecker(max_requests=self.settings.max_requests)
        size, limit = 0, self.settings.max_file_bytes
        try:
            for piece in form.content():
                size += len(piece)
                if size > limit:
                    raise TooLarge(
                        413,
                        f"The file is larger than this server's limit of {limit} bytes.",
                        param="file",
                        code="file_too_large",
                    )
                upload.write(piece)
                checker.feed(piece)
        except BaseException:
            upload.abort()
            raise
        name = (part.filename or "upload.jsonl").replace("/", "_")[-255:]
        check = checker.finish().wire()
        return upload, FileMeta(file_id, size, now, name, "batch", check=check)

    def get(self, namespace: str, file_id: str) -> FileMeta:
        """The metadata of a file of the namespace, or 404 (an expired file is removed)."""
        meta = self.store.get_meta(namespace, file_id) if is_file_id(file_id) else None
        if meta is None:
            raise no_file(file_id)
        if meta.expires_at is not None and meta.expires_at <= self.clock():
            self.store.delete(namespace, meta)
            raise no_file(file_id)
        return meta

    def content(self, namespace: str, file_id: str) -> tuple[int, Iterator[bytes]]:
        """GET /v1/files/{id}/content: the size and the bytes."""
        return self.store.size_and_chunks(namespace, self.get(namespace, file_id))

    def delete(self, namespace: str, file_id: str) -> Obj:
        """DELETE /v1/files/{id}."""
        self.store.delete(namespace, self.get(namespace, file_id))
        return {"id": file_id, "object": "file", "deleted": True}

    def list(self, namespace: str, query: dict[str, str]) -> Obj:
        """GET /v1/files: newest first (order=asc: oldest), `after` an id, `purpose` a filter."""
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise bad_request("order must be asc or desc.", param="order")
        limit = limit_of(query, default=LIST_LIMIT_MAX, most=LIST_LIMIT_MAX)
        ids = sorted(self.store.list_ids(namespace), reverse=order == "desc")
        after = query.get("after")
        if after:
            ids = ids[ids.index(after) + 1 :] if after in ids else []
        data: list[Obj] = []
        has_more = False
        for file_id in ids:
            meta = self.store.get_meta(namespace, file_id)
            if meta is None or (query.get("purpose") and meta.purpose != query["purpose"]):
                continue
            if meta.expires_at is not None and meta.expires_at <= self.clock():
                continue
            if len(data) == limit:
                has_more = True
                break
            data.append(meta.openai())
        return page(data, has_more=has_more)


def page(data: list[Obj], *, has_more: bool) -> Obj:
    """A list answer, as OpenAI's cursor pages are."""
    first = data[0]["id"] if data else None
    last = data[-1]["id"] if data else None
    return {
        "object": "list",
        "data": data,
        "first_id": first,
        "last_id": last,
        "has_more": has_more,
    }


def limit_of(query: dict[str, str], *, default: int, most: int) -> int:
    """The `limit` query parameter, checked."""
    text = query.get("limit")
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= most:
        raise bad_request(f"limit must be a whole number from 1 to {most}.", param="limit")
    return int(text)


def _small(form: Multipart, part: Part) -> str:
    data = bytearray()
    for piece in form.content():
        data += piece
        if len(data) > MAX_FIELD_BYTES:
            raise bad_request(f"The form field '{part.name}' is too long.", param=part.name)
    return data.decode("utf-8", "replace").strip()


def _purpose(fields: dict[str, str]) -> str:
    purpose = fields.get("purpose")
    if purpose is None:
        raise bad_request("Missing required parameter: 'purpose'.", param="purpose")
    if purpose != "batch":
        raise bad_request(
            f"purpose '{purpose}' is not supported: this server keeps files for the Batch API "
            "(purpose batch).",
            param="purpose",
        )
    return purpose


def _expires_at(fields: dict[str, str], now: int) -> int | None:
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise bad_request("expires_after.anchor must be created_at.", param="expires_after")
    if seconds is None or not seconds.isdigit() or not EXPIRES_MIN <= int(seconds) <= EXPIRES_MAX:
        raise bad_request(
            f"expires_after.seconds must be from {EXPIRES_MIN} to {EXPIRES_MAX}.",
            param="expires_after",
        )
    return now + int(seconds)
