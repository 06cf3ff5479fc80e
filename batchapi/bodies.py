"""Request bodies read as streams: by Content-Length or chunked, and multipart/form-data parts.

An upload may be hundreds of megabytes, so it is never read whole: `BodyReader` hands out
pieces of the body as they arrive, and `Multipart` splits them into form parts whose content is
again a stream of pieces (at most one 64 KiB read ahead plus the boundary's length held). The
standard library's `cgi` module is gone from Python 3.13, and `email` reads whole messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from batchapi.errors import ApiFailure, bad_request

READ_SIZE = 64 * 1024
MAX_PART_HEADERS = 16 * 1024
MAX_PREAMBLE = 64 * 1024
_PARAM = re.compile(r';\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')


class BodyReader:
    """The request body: `read()` gives the next piece, b"" at its end."""

    def __init__(self, stream: BinaryIO, headers: Any) -> None:
        self.stream = stream
        self.chunked = "chunked" in (headers.get("Transfer-Encoding") or "").lower()
        length = headers.get("Content-Length")
        if not self.chunked and length is None:
            raise ApiFailure(411, "Send the body with a Content-Length or chunked.")
        try:
            self.left = int(length) if length is not None else 0
        except ValueError:
            raise bad_request(f"Content-Length {length!r} is not a number") from None
        self.received = 0
        self._chunk_left = 0
        self._ended = False

    def read(self, size: int = READ_SIZE) -> bytes:
        data = self._read_chunked(size) if self.chunked else self._read_plain(size)
        self.received += len(data)
        return data

    def _read_plain(self, size: int) -> bytes:
        if self.left <= 0:
            return b""
        data = self._read_some(min(size, self.left))
        if not data:
            raise bad_request("The request body ended before its Content-Length.")
        self.left -= len(data)
        return data

    def _read_chunked(self, size: int) -> bytes:
        if self._ended:
            return b""
        if self._chunk_left == 0:
            line = self.stream.readline(1024).strip()
            try:
                self._chunk_left = int(line.split(b";")[0], 16)
            except ValueError:
                raise bad_request("Malformed chunked request body.") from None
            if self._chunk_left == 0:
                while self.stream.readline(1024).strip():  # trailers
                    pass
                self._ended = True
                return b""
        data = self._read_some(min(size, self._chunk_left))
        if not data:
            raise bad_request("The chunked request body ended early.")
        self._chunk_left -= len(data)
        if self._chunk_left == 0:
            self.stream.readline(8)  # the CRLF after the chunk
        return data

    def _read_some(self, size: int) -> bytes:
        """What has arrived, up to `size` (waiting only for the first byte), so that a slow
        client's bytes reach the store as they come."""
        read1 = getattr(self.stream, "read1", None)
        return bytes(read1(size) if read1 is not None else self.stream.read(size))

    def drain(self, limit: int) -> bool:
        """Read and drop what is left (so the client reads our answer), at most `limit` bytes;
        False when more was left than that."""
        dropped = 0
        while dropped <= limit:
            data = self.read()
            if not data:
                return True
            dropped += len(data)
        return False


class Part:
    """One form part: its field name, file name (if any) and headers."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers
        params = _params(headers.get("content-disposition", ""))
        self.name = params.get("name", "")
        self.filename = params.get("filename")


class Multipart:
    """The parts of a multipart/form-data body, in order; read each part's `content()` (or let
    `next_part` skip it) before the next."""

    def __init__(self, body: BodyReader, boundary: str) -> None:
        self.body = body
        self.delimiter = b"--" + boundary.encode("latin-1")
        self.marker = b"\r\n" + self.delimiter
        self.buffer = bytearray()
        self.started = False
        self.ended = False
        self.in_content = False

    @staticmethod
    def boundary_of(content_type: str) -> str:
        """The boundary of a multipart/form-data Content-Type, or 400."""
        kind = content_type.split(";", 1)[0].strip().lower()
        boundary = _params(content_type).get("boundary")
        if kind != "multipart/form-data" or not boundary:
            raise ApiFailure(415, "Upload files as multipart/form-data (fields file and purpose).")
        return boundary

    def next_part(self) -> Part | None:
        """The next part's headers, None after the last part."""
        if self.in_content:
            for _ in self.content():
                pass
        if not self.started:
            self._skip_preamble()
        if self.ended:
            return None
        self._need(2)
        if self.buffer[:2] == b"--":
            self.ended = True
            return None
        if self.buffer[:2] != b"\r\n":
            raise bad_request("Malformed multipart body (no line end after a boundary).")
        del self.buffer[:2]
        self.in_content = True
        return Part(self._headers())

    def content(self) -> Iterator[bytes]:
        """The current part's content in pieces."""
        keep = len(self.marker) - 1
        while self.in_content:
            found = self.buffer.find(self.marker)
            if found >= 0:
                piece = bytes(self.buffer[:found])
                del self.buffer[: found + len(self.marker)]
                self.in_content = False
                if piece:
                    yield piece
                return
            if len(self.buffer) > keep:
                piece = bytes(self.buffer[: len(self.buffer) - keep])
                del self.buffer[: len(piece)]
                yield piece
            if not self._fill():
                raise bad_request("The multipart body ended inside a part.")

    def _skip_preamble(self) -> None:
        while True:
            found = self.buffer.find(self.delimiter)
            if found >= 0:
                del self.buffer[: found + len(self.delimiter)]
                self.started = True
                return
            if len(self.buffer) > MAX_PREAMBLE or not self._fill():
                raise bad_request("The multipart body holds no part with its boundary.")

    def _headers(self) -> dict[str, str]:
        self._need(2)
        if self.buffer[:2] == b"\r\n":  # a part without headers
            del self.buffer[:2]
            return {}
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > MAX_PART_HEADERS or not self._fill():
                raise bad_request("Malformed multipart body (a part's headers do not end).")
        text = bytes(self.buffer[:end]).decode("utf-8", "replace")
        del self.buffer[: end + 4]
        headers = {}
        for line in text.split("\r\n"):
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        return headers

    def _need(self, size: int) -> None:
        while len(self.buffer) < size:
            if not self._fill():
                raise bad_request("The multipart body ended early.")

    def _fill(self) -> bool:
        data = self.body.read()
        self.buffer += data
        return bool(data)


def _params(header: str) -> dict[str, str]:
    """`; key=value` parameters of a header value (quoted strings unquoted), keys lowercase."""
    found = {}
    for key, value in _PARAM.findall(header):
        value = value.strip()
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        found[key.lower()] = value
    return found
