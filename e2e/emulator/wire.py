"""HTTP/1.1 request heads and response heads, without the stdlib's slow paths.

`BaseHTTPRequestHandler.parse_request` hands the header block to the `email`
package's feed parser, which costs more than the emulator's whole admission of a
ConfigMap; `send_response` formats a Date with `email.utils` and each
`send_header` encodes one line. `FastHeadersHandler` parses the request head of an
ordinary `HTTP/1.1` request (every header line `Name: value`) itself, into the
same `http.client.HTTPMessage` the stdlib builds, and hands anything unusual to
the stdlib code unchanged. `response_head` builds the status line and headers in
one string, so a response is one `sendall`.
"""

from __future__ import annotations

import email.parser
import email.utils
import http.client
import re
import threading
import time
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

# http.client's limits for a request head (its _MAXLINE and _MAXHEADERS).
MAX_LINE = 65536
MAX_HEADERS = 100
# A header line the email parser would read as exactly (name, value): a name of the
# characters its headerRE allows, a colon, optional blanks, and a value with no CR/LF.
_SIMPLE_LINE = re.compile(rb"([\x21-\x39\x3b-\x7e]+):[ \t]*([^\r\n]*)\r\n")


class FastHeadersHandler(BaseHTTPRequestHandler):
    """A BaseHTTPRequestHandler whose plain HTTP/1.1 requests skip the email parser."""

    raw_requestline: bytes  # set by handle_one_request
    MessageClass: type[Message] = http.client.HTTPMessage

    def parse_request(self) -> bool:
        """The stdlib's parse_request for `<method> <path> HTTP/1.1` requests, else itself."""
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = requestline.split()
        if len(words) != 3 or words[2] != "HTTP/1.1" or self.protocol_version < "HTTP/1.1":
            return super().parse_request()
        self.command, self.path = words[0], words[1]
        self.request_version = "HTTP/1.1"
        self.requestline = requestline
        self.close_connection = False
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")  # as the stdlib does (gh-87389)
        try:
            self.headers = self._read_head()
        except http.client.LineTooLong as err:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long", str(err))
            return False
        except http.client.HTTPException as err:
            self.send_error(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers", str(err)
            )
            return False
        conntype = self.headers.get("Connection", "").lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive":
            self.close_connection = False
        if self.headers.get("Expect", "").lower() == "100-continue":
            return self.handle_expect_100()
        return True

    def _read_head(self) -> Message:
        """Header lines with http.client's limits, as the message its parse_headers returns."""
        lines: list[bytes] = []
        while True:
            line = self.rfile.readline(MAX_LINE + 1)
            if len(line) > MAX_LINE:
                raise http.client.LineTooLong("header line")
            lines.append(line)
            if len(lines) > MAX_HEADERS:
                raise http.client.HTTPException(f"got more than {MAX_HEADERS} headers")
            if line in (b"\r\n", b"\n", b""):
                break
        pairs = []
        for line in lines[:-1]:
            m = _SIMPLE_LINE.fullmatch(line)
            if m is None:  # folded, bare LF, odd name...: let the email parser decide
                text = b"".join(lines).decode("iso-8859-1")
                return email.parser.Parser(_class=self.MessageClass).parsestr(text)
            pairs.append((m.group(1).decode("iso-8859-1"), m.group(2).decode("iso-8859-1")))
        return RequestHeaders(pairs)


class RequestHeaders(http.client.HTTPMessage):
    """The HTTPMessage the stdlib would build, with `get` as one dict lookup.

    `Message.get` scans every header and runs the policy's fetch hook on each call,
    and a request asks for five or six of them. The index holds the first value of
    each name (what `get` returns); changing the headers drops it.
    """

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__()
        first: dict[str, str] = {}
        for name, value in pairs:
            super().set_raw(name, value)
            first.setdefault(name.lower(), value)
        self._first: dict[str, str] | None = first

    def get(self, name: str, failobj: Any = None) -> Any:
        if self._first is None:
            return super().get(name, failobj)
        return self._first.get(name.lower(), failobj)

    def __setitem__(self, name: str, val: Any) -> None:
        self._first = None
        super().__setitem__(name, val)

    def __delitem__(self, name: str) -> None:
        self._first = None
        super().__delitem__(name)

    def set_raw(self, name: str, value: Any) -> None:
        self._first = None
        super().set_raw(name, value)

    def add_header(self, _name: str, _value: str, **_params: Any) -> None:
        self._first = None
        super().add_header(_name, _value, **_params)

    def replace_header(self, _name: str, _value: Any) -> None:
        self._first = None
        super().replace_header(_name, _value)


_date_lock = threading.Lock()
_date_cache: tuple[int, str] = (0, "")


def http_date() -> str:
    """The Date header value `date_time_string()` gives, formatted once per second."""
    global _date_cache
    now = int(time.time())
    second, text = _date_cache
    if second != now:
        text = email.utils.formatdate(now, usegmt=True)
        with _date_lock:
            _date_cache = (now, text)
    return text


def response_head(
    handler: BaseHTTPRequestHandler, code: int, headers: list[tuple[str, str]]
) -> bytes:
    """Status line, Server and Date (as send_response writes them), headers, blank line."""
    phrase = handler.responses[code][0] if code in handler.responses else ""
    parts = [
        f"{handler.protocol_version} {code} {phrase}\r\n",
        f"Server: {handler.version_string()}\r\n",
        f"Date: {http_date()}\r\n",
    ]
    parts += [f"{key}: {value}\r\n" for key, value in headers]
    parts.append("\r\n")
    return "".join(parts).encode("latin-1", "strict")


def chunk_frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk: hex size, CRLF, data, CRLF."""
    return b"%x\r\n%b\r\n" % (len(data), data)
