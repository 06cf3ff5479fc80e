"""Request bodies as streams: Content-Length and chunked bodies, multipart/form-data parts.

Real: the readers over in-memory byte streams cut into pieces of every size, so that a
boundary, a CRLF or a header split across two reads is still found. Faked: the socket
(io.BytesIO behind a reader that hands out at most `step` bytes per read).
"""

from __future__ import annotations

import io

import pytest

from batchapi.bodies import BodyReader, Multipart
from batchapi.errors import ApiFailure

BOUNDARY = "----form-7MA4YWxkTrZu0gW"


class Trickle(io.RawIOBase):
    """A stream that returns at most `step` bytes per read (a slow socket)."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.step, self.pos = data, step, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        piece = self.data[self.pos : self.pos + min(self.step, len(buffer))]
        buffer[: len(piece)] = piece
        self.pos += len(piece)
        return len(piece)


def form(*parts: tuple[str, str | None, bytes]) -> bytes:
    out = b"preamble to ignore\r\n"
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += (
            (
                f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + data
            + b"\r\n"
        )
    return out + f"--{BOUNDARY}--\r\n".encode()


def reader(data: bytes, step: int, *, chunked: bool = False) -> BodyReader:
    if chunked:
        wire = (
            b"".join(
                b"%x\r\n" % len(data[i : i + 7]) + data[i : i + 7] + b"\r\n"
                for i in range(0, len(data), 7)
            )
            + b"0\r\n\r\n"
        )
        headers = {"Transfer-Encoding": "chunked"}
    else:
        wire, headers = data, {"Content-Length": str(len(data))}
    return BodyReader(io.BufferedReader(Trickle(wire, step)), headers)


@pytest.mark.parametrize("step", [1, 3, 17, 64, 4096])
@pytest.mark.parametrize("chunked", [False, True])
def test_parts_come_out_whole_however_the_bytes_arrive(step: int, chunked: bool) -> None:
    content = b'{"custom_id": "a"}\r\n--not-the-boundary\r\n' * 50 + b"\r\n--" + b"x" * 10
    body = form(("purpose", None, b"batch"), ("file", "in.jsonl", content))
    parsed = Multipart(reader(body, step, chunked=chunked), BOUNDARY)
    found = []
    while (part := parsed.next_part()) is not None:
        found.append((part.name, part.filename, b"".join(parsed.content())))
    assert found == [("purpose", None, b"batch"), ("file", "in.jsonl", content)]


def test_an_unread_part_is_skipped() -> None:
    body = form(("file", "a.jsonl", b"x" * 1000), ("purpose", None, b"batch"))
    parsed = Multipart(reader(body, 100), BOUNDARY)
    assert parsed.next_part().name == "file"  # type: ignore[union-attr]
    purpose = parsed.next_part()
    assert purpose is not None and b"".join(parsed.content()) == b"batch"
    assert parsed.next_part() is None


def test_a_body_cut_short_is_a_400() -> None:
    body = form(("file", "a.jsonl", b"x" * 1000))[:500]
    parsed = Multipart(BodyReader(io.BytesIO(body), {"Content-Length": "2000"}), BOUNDARY)
    assert parsed.next_part() is not None
    with pytest.raises(ApiFailure, match="ended before its Content-Length"):
        b"".join(parsed.content())


def test_only_multipart_form_data_with_a_boundary_is_an_upload() -> None:
    assert Multipart.boundary_of(f'multipart/form-data; boundary="{BOUNDARY}"') == BOUNDARY
    for wrong in ("application/json", "multipart/form-data", "multipart/mixed; boundary=x"):
        with pytest.raises(ApiFailure) as refused:
            Multipart.boundary_of(wrong)
        assert refused.value.status == 415


def test_a_body_without_a_length_is_refused() -> None:
    with pytest.raises(ApiFailure) as refused:
        BodyReader(io.BytesIO(b""), {})
    assert refused.value.status == 411


def test_drain_reads_the_rest_up_to_a_limit() -> None:
    body = reader(b"x" * 10_000, 1000)
    assert body.read(10) == b"x" * 10
    assert body.drain(20_000) is True and body.read() == b""
    assert reader(b"x" * 10_000, 1000).drain(5_000) is False
