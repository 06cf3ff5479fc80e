"""HTTP for the REST protocol clients: kept-alive connections, auth, TLS and error mapping.

Why `http.client` and not `requests`: the runner's throughput is bounded by the model server, and
on a small node the client's CPU competes with it. Client CPU per request, same body, local
server, on a busy 2-core VM: http.client ~300 us, urllib3 ~450 us, a requests adapter ~650 us,
`Session.post` ~1200 us. So each worker thread keeps its own `http.client` connection per host
(connections are not thread-safe; threads never share one), and everything `requests` would add
(proxies from the environment, TLS options) is set up once here.

Rules the clients rely on (they never retry themselves; the pipeline does):
- connection errors, timeouts, 408, 429 and 5xx raise TransientError, with `retry_after` from a
  Retry-After header (seconds or an HTTP date); a 500 raises its ServerFault kind (the server
  failed inside: perhaps on a record, which the pipeline then looks for);
- 401, 403 and 404, and a TLS certificate we do not trust, raise ConfigError: they blame the
  endpoint or its credentials, so the run stops (exit 2) with a hint instead of failing every
  record one request at a time;
- any other status outside 2xx raises BatchRejected with a short reason (at most ~200 characters
  of what the server said, never request headers);
- a 2xx body that is not JSON raises TransientError: it is what proxies and ingresses send (an
  HTML error page), not a model's answer. JSON of the wrong shape is the protocol module's
  business and becomes a RecordFailure per record.
- one exception to "never retry": a request on a kept-alive connection that the server had
  already closed is re-sent once on a fresh connection, before any response was read.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import threading
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from contracts.model import ModelEndpoint
from runners import jsonio
from runners.api import BatchRejected, ConfigError, RunContext, TransientError
from runners.models.common import credential
from runners.netguard import NO_GUARD, Guard
from runners.retry import ServerFault, retry_after
from runners.tls import ssl_context

REASON_LIMIT = 200
# Errors meaning "the server closed this kept-alive connection": safe to re-send once.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class HttpRejected(BatchRejected):
    """BatchRejected for an HTTP status, which protocol modules may look at (and the whole
    response, for those that keep what the server said: openai-batch)."""

    def __init__(self, message: str, *, status: int, response: HttpResponse | None = None):
        super().__init__(message)
        self.status = status
        self.response = response


class HttpUnavailable(TransientError):
    """TransientError for an HTTP status (408, 429, 5xx), with the response."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        retry_after: float | None,
        response: HttpResponse | None = None,
    ) -> None:
        super().__init__(message, retry_after=retry_after)
        self.status = status
        self.response = response


class HttpServerError(HttpUnavailable, ServerFault):
    """HTTP 500: the server failed inside, perhaps on one record of the batch."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A complete response: status, headers with lower-case names, and the body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Transport(Protocol):
    """Sends one request and reads the whole response; safe to call from several threads.

    Raises OSError or http.client.HTTPException when no response could be read.
    Tests hand clients a fake transport built from a handler function.
    """

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse: ...

    def close(self) -> None: ...


def with_scheme(url: str) -> str:
    """`url` with http:// added when it has no scheme (Krateo writes bare host/path URLs)."""
    return url if "://" in url else f"http://{url}"


# (scheme, host, port, proxy address or None): what a kept-alive connection is for.
_Key = tuple[str, str, int, tuple[str, int] | None]


@dataclass(frozen=True, slots=True)
class _Target:
    key: _Key
    path: str


def _parse_target(url: str) -> _Target:
    """Where to connect for `url` and what to put in the request line (absolute via a proxy)."""
    parts = urlsplit(url)
    scheme, host = parts.scheme, parts.hostname or ""
    port = parts.port or (443 if scheme == "https" else 80)
    proxy = _proxy_for(scheme, host)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if proxy is not None and scheme != "https":
        path = url  # plain HTTP through a proxy: absolute-form request target
    return _Target((scheme, host, port, proxy), path)


class ConnectionPool:
    """One kept-alive `http.client` connection per thread and host (the default Transport)."""

    def __init__(
        self, *, timeout: float, tls: ssl.SSLContext | None = None, guard: Guard = NO_GUARD
    ) -> None:
        self._timeout = timeout
        self._tls = tls
        self._guard = guard  # every new connection resolves and connects through it
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[http.client.HTTPConnection] = []
        self._targets: dict[str, _Target] = {}

    def send(
        self, method: str, url: str, *, body: bytes | None, headers: Mapping[str, str]
    ) -> HttpResponse:
        target = self._target(url)
        conn, reused = self._connection(target.key)
        try:
            return self._exchange(conn, method, target.path, body=body, headers=headers)
        except _STALE:
            self._discard(target.key, conn)
            if not reused:
                raise
        conn, _ = self._connection(target.key)
        return self._exchange(conn, method, target.path, body=body, headers=headers)

    def _exchange(
        self,
        conn: http.client.HTTPConnection,
        method: str,
        path: str,
        *,
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> HttpResponse:
        try:
            conn.request(method, path, body=body, headers=dict(headers))
            response = conn.getresponse()
            data = response.read()
        except BaseException:
            conn.close()
            raise
        if response.will_close:
            conn.close()  # http.client reconnects on the next request
        fields = {name.lower(): value for name, value in response.getheaders()}
        return HttpResponse(response.status, fields, data)

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = _parse_target(url)
        return target

    def _connection(self, key: _Key) -> tuple[http.client.HTTPConnection, bool]:
        conns: dict[_Key, http.client.HTTPConnection] | None
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(key)
        if conn is not None:
            return conn, conn.sock is not None
        conn = conns[key] = self._open(key)
        with self._lock:
            self._all.append(conn)
        return conn, False

    def _open(self, key: _Key) -> http.client.HTTPConnection:
        scheme, host, port, proxy = key
        address = proxy or (host, port)
        if scheme != "https":
            return self._guard.attach(http.client.HTTPConnection(*address, timeout=self._timeout))
        conn = http.client.HTTPSConnection(*address, timeout=self._timeout, context=self._tls)
        self._guard.attach(conn)
        if proxy is not None:
            conn.set_tunnel(host, port)
        return conn

    def _discard(self, key: _Key, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self._local.conns.pop(key, None)
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()


def _proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """The (host, port) of the proxy the environment names for `host`, as requests would use."""
    proxy = urllib.request.getproxies().get(scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    parts = urlsplit(with_scheme(proxy))
    return parts.hostname or "", parts.port or 3128


def short_reason(body: bytes) -> str:
    """What the server said, in one line of at most REASON_LIMIT characters."""
    text = body.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        message = doc.get("error", doc.get("detail", doc.get("message", text)))
        if isinstance(message, dict):
            message = message.get("message", message)
        text = message if isinstance(message, str) else json.dumps(message)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 3] + "..."


# Statuses that blame the endpoint, not a record: no retry and no per-record isolation can fix
# them, so the run stops with exit 2 (bad configuration) and says what to check.
ENDPOINT_HINTS = {
    401: "check the key Secret or the token's audience in model.auth",
    403: "check model.auth and what that key or ServiceAccount may access",
    404: "check model.url and model.name",
}


def check_status(
    response: HttpResponse, *, what: str, per_record: frozenset[int] = frozenset()
) -> None:
    """Raise TransientError, ConfigError or BatchRejected unless the status is 2xx.

    `per_record`: statuses of ENDPOINT_HINTS that blame the request rather than the endpoint
    for this caller (an openai-batch line names its own URL: a 404 is that line's)."""
    status = response.status
    if 200 <= status < 300:
        return
    reason = f"{what}: HTTP {status}"
    detail = short_reason(response.body)
    if detail:
        reason += f": {detail}"
    if status in (408, 429) or status >= 500:
        wait = retry_after(response.headers.get("retry-after"))
        kind = HttpServerError if status == 500 else HttpUnavailable
        raise kind(reason, status=status, retry_after=wait, response=response)
    if status in ENDPOINT_HINTS and status not in per_record:
        raise ConfigError(f"{reason} ({ENDPOINT_HINTS[status]})")
    if 300 <= status < 400:
        location = response.headers.get("location", "?")
        reason += f" (redirected to {location[:REASON_LIMIT]}; set model.url to that address)"
    raise HttpRejected(reason, status=status, response=response)


# The fallback encoder, made once: json.dumps with separators builds a new one per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"))
# orjson encodes datetimes and dataclasses itself; json refuses them, and so do requests.
_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def json_body(doc: Any) -> bytes:
    """`doc` as compact UTF-8 JSON bytes (orjson: 23 against 163 us for KServe v1's 256 iris
    rows), the values json.dumps(doc, separators=(",", ":")) writes. Where orjson refuses a
    value (an integer beyond 64 bits, a key that is no string, a lone surrogate, an object
    neither writes) or writes one otherwise (NaN and the infinities: null), the standard
    library writes the whole body as before (NaN, Infinity), or raises TypeError."""
    try:
        data = orjson.dumps(doc, option=_PASSTHROUGH)
    except orjson.JSONEncodeError:
        return _COMPACT.encode(doc).encode()
    if b"null" in data and jsonio.has_non_finite(doc):
        return _COMPACT.encode(doc).encode()
    return data


def parse_json(response: HttpResponse, *, what: str) -> Any:
    """The JSON body of a 2xx response (orjson, else the standard library's reading: NaN);
    TransientError when it is not JSON (a proxy's page)."""
    try:
        return jsonio.loads(response.body)
    except ValueError:
        kind = response.headers.get("content-type", "no content type")
        raise TransientError(
            f"{what}: the response is not JSON ({kind}): {short_reason(response.body)}"
        ) from None


class HttpClient:
    """Sends requests to one endpoint with its auth header, TLS settings and timeout."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        ctx: RunContext,
        *,
        transport: Transport | None = None,
    ) -> None:
        base = with_scheme(endpoint.url)
        https = base.startswith("https://")
        tls = ssl_context(endpoint.tls, ctx, field="model.tls.caSecretRef") if https else None
        self.transport = transport or ConnectionPool(
            timeout=endpoint.timeout_seconds, tls=tls, guard=Guard.of(ctx)
        )
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._credential = credential(endpoint, ctx)
        if self._credential is not None:
            self.headers[self._credential.header] = self._credential.value()
        self._timeout = endpoint.timeout_seconds

    def send(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        what: str,
        per_record: frozenset[int] = frozenset(),
    ) -> HttpResponse:
        """The response to one request; raises TransientError/BatchRejected per the rules
        (`per_record` as check_status's)."""
        own = self._current_headers()
        merged = own if headers is None else {**own, **headers}
        try:
            response = self.transport.send(method, url, body=body, headers=merged)
        except TimeoutError:
            raise TransientError(f"{what}: no answer within {self._timeout:g}s") from None
        except ssl.SSLCertVerificationError as exc:
            raise ConfigError(
                f"{what}: TLS certificate not trusted ({exc.verify_message}); "
                "set model.tls.caSecretRef to the CA that signed it"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}"[:REASON_LIMIT]) from None
        check_status(response, what=what, per_record=per_record)
        return response

    def _current_headers(self) -> dict[str, str]:
        """The client's headers with the credential as it is now: a new dict only when a
        ServiceAccount token was replaced (the dict is swapped whole, threads share it)."""
        auth = self._credential
        if auth is not None and not auth.is_static:
            value = auth.value()
            if self.headers[auth.header] is not value:
                self.headers = {**self.headers, auth.header: value}
        return self.headers

    def post_json(self, url: str, body: bytes, *, what: str) -> Any:
        """POST a serialised JSON body and return the decoded JSON answer."""
        return parse_json(self.send("POST", url, body=body, what=what), what=what)

    def close(self) -> None:
        self.transport.close()
