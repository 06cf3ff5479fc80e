"""HTTP plumbing shared by the `http` and `krateo` storage backends.

Why a module of its own: both backends speak JSON over HTTP with the same
error rules, and backends must not import each other.

Why the runner keeps two HTTP stacks, `requests` here and `http.client` in
runners/models/http.py: storage calls are few (one per page or chunk) and want
what requests does well (redirects, basic auth, Link headers for pagination,
proxy and CA settings from the environment), while model calls are the
hot path, thousands a second from several threads, where http.client measured
two to four times less client CPU per request than requests (see that module),
CPU a small node's model server needs. One stack would cost either throughput
or a re-implementation of requests. What must agree between the two, trusting
servers, is read in one place: runners/tls.py.

The rules:
- connection errors, timeouts, 429 and 5xx are TransientError (the pipeline
  retries with backoff), carrying the server's Retry-After when it sent one;
- a server certificate we do not trust is a ConfigError (exit 2), as for the
  model clients: retrying cannot fix it, and the message says which setting
  names the CA. A CA bundle is checked when the session is made
  (runners/tls.py), not at the first request;
- any other 4xx is a ConfigError (wrong URL, path, credentials: do not retry),
  quoting the start of the answer, except for requests that carry records
  (`quote=False`): a receiver may echo them, and the message becomes the run's
  `status.result.reason`;
- a response body that is not JSON is a ConfigError naming the URL.

Where requests go (issue 17): a session sends only to its configured origins (scheme,
host and port of the URLs in the contract or the endpoint Secret), redirects included.
A next-page link or a redirect to another origin, or to a URL that is not http(s) or
carries `user@` credentials, is a ConfigError naming both origins, raised before anything
is sent there. Refused, not followed without credentials: which headers are credentials
is the user's to know (`headers` may carry a token), cookies and basic auth ride along,
and a pagination that moves to another host is rare enough to configure by hand. Every
connection goes through the run's network guard (runners/netguard.py): the
`GuardedAdapter` below.
"""

from __future__ import annotations

import functools
import re
import socket
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NameResolutionError, NewConnectionError

from runners.api import ConfigError, TransientError
from runners.netguard import Guard
from runners.retry import retry_after

_SHOWN = 200  # characters of a server-sent URL a message shows


def new_session(
    headers: dict[str, str],
    *,
    verify: bool | str = True,
    origins: Iterable[str],
    field: str,
    guard: Guard,
) -> requests.Session:
    """A pooled session with default headers (one per sink/source, reused for every call)
    that sends only to `origins` (the configured URLs) and connects through `guard`.

    `field` names the setting a refusal blames."""
    session = OriginSession(origins, field=field)
    session.headers.update(headers)
    session.verify = verify
    if guard.is_active:
        adapter = GuardedAdapter(guard)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


class Origin(NamedTuple):
    """Where a URL's requests go: scheme, host and port (the default port made explicit)."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str) -> Origin | None:
    """The origin of an http(s) URL with a host; None for anything else."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return None
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return Origin(scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80))


def shown(url: str) -> str:
    """`url` fit for a message: without `user:password@`, at most 200 characters."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        url = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return url if len(url) <= _SHOWN else url[: _SHOWN - 3] + "..."


class OriginRefused(ConfigError):
    """A request would leave the configured origins (a next-page link, a redirect)."""


class OriginSession(requests.Session):
    """A Session that sends only to its configured origins (see module doc).

    `send` is the one door: requests calls it for the first request and for every
    redirect it follows; `rebuild_auth`, which requests calls first for a redirect, only
    words the refusal of one.
    """

    def __init__(self, origins: Iterable[str], *, field: str) -> None:
        super().__init__()
        self.origins = frozenset(o for o in map(origin_of, origins) if o is not None)
        self.field = field

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Send `request` if its URL is on a configured origin; else OriginRefused."""
        self.check(request.method or "GET", request.url or "")
        return super().send(request, **kwargs)

    def rebuild_auth(
        self, prepared_request: requests.PreparedRequest, response: requests.Response
    ) -> None:
        """Refuse a redirect off the configured origins before requests prepares it."""
        method = prepared_request.method or "GET"
        self.check(method, prepared_request.url or "", redirected_from=response.url)
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]

    def check(self, method: str, url: str, *, redirected_from: str | None = None) -> None:
        """OriginRefused unless `url` is on a configured origin and carries no credentials."""
        target = origin_of(url)
        has_user = urlsplit(url).username is not None
        if target in self.origins and not has_user:
            return
        allowed = " or ".join(sorted(str(o) for o in self.origins)) or "(none)"
        if redirected_from is None:
            what = f"{method} {shown(url)}"
            rule = "a URL the server sends (a next-page link) must stay on it"
        else:
            what = f"{method} {shown(redirected_from)} was redirected to {shown(url)}"
            rule = f"redirects are followed only within it: set {self.field} to the new address"
        if has_user:
            where = "a URL with credentials (user@)"
        elif target is None:
            scheme = urlsplit(url).scheme
            where = f"a {scheme}:// URL" if scheme else "a URL without a scheme"
        else:
            where = f"origin {target}"
        raise OriginRefused(
            f"{self.field}: {what}: {where} is not the configured origin {allowed}; "
            f"credentials go only to the configured origin, so {rule}"
        )


def checked_secret_url(value: str, *, field: str, hint: str) -> str:
    """`value`, a URL read from a Secret, if it is http(s) with a host and no `user@`; else
    a ConfigError naming `field` and `hint` (never the value: it is a Secret's)."""
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(f"{field}: must start with http:// or https://")
    if "@" in parts.netloc:
        raise ConfigError(f"{field}: must not contain credentials (user:password@); {hint}")
    if origin_of(value) is None:
        raise ConfigError(f"{field}: is not a URL with a host (and a port of 1 to 65535)")
    return value


def _guarded_new_conn(guard: Guard, base: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """urllib3's `_new_conn`, run once per checked address of the host (each tried in turn)."""

    def new_conn(conn: Any) -> Any:
        host = conn._dns_host
        try:
            infos = guard.resolve(host, conn.port)
        except socket.gaierror as exc:
            raise NameResolutionError(conn.host, conn, exc) from exc
        error: Exception | None = None
        for info in infos:
            conn._dns_host = str(info[4][0])  # where the socket goes; TLS still checks `host`
            try:
                return base(conn)
            except NewConnectionError as exc:
                error = exc
            finally:
                conn._dns_host = host
        raise error or NewConnectionError(conn, f"{host}: getaddrinfo returned no address")

    return new_conn


@functools.lru_cache(maxsize=8)
def _pool_classes(guard: Guard) -> dict[str, type]:
    """urllib3 pool classes whose connections go through `guard` (one set per guard)."""
    pools: dict[str, type] = {}
    for scheme, pool, conn in (
        ("http", HTTPConnectionPool, HTTPConnection),
        ("https", HTTPSConnectionPool, HTTPSConnection),
    ):
        guarded = type(
            f"Guarded{conn.__name__}",
            (conn,),
            {"_new_conn": _guarded_new_conn(guard, conn._new_conn)},
        )
        pools[scheme] = type(f"Guarded{pool.__name__}", (pool,), {"ConnectionCls": guarded})
    return pools


class GuardedAdapter(HTTPAdapter):
    """A requests adapter whose connections (direct, or to an HTTP proxy) pass `guard`.

    Through a SOCKS proxy nothing is checked here: the proxy makes the connection.
    """

    def __init__(self, guard: Guard) -> None:
        self.guard = guard  # before super().__init__, which builds the pool manager
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        """The pool manager, with guarded pool classes."""
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self.guard)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        """A proxy's pool manager, with guarded pool classes unless it is a SOCKS proxy."""
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if not proxy.lower().startswith("socks"):
            manager.pool_classes_by_scheme = _pool_classes(self.guard)
        return manager


# OpenSSL's reason for a failed verification (unknown CA, self-signed, hostname mismatch).
_NOT_TRUSTED = re.compile(r"certificate verify failed: ([^(\]'\"]+)")


def send(
    session: requests.Session,
    method: str,
    url: str,
    *,
    field: str,
    timeout: float,
    tls_hint: str,
    quote: bool = True,
    **kwargs: Any,
) -> requests.Response:
    """One request, its failures mapped to TransientError / ConfigError (see module doc).

    `tls_hint` says which setting to fix when the server's certificate is not trusted;
    `quote=False` leaves the answer out of a 4xx's message (the request carried records).
    """
    try:
        # `verify` per request: requests lets env REQUESTS_CA_BUNDLE override the session's.
        response = session.request(method, url, timeout=timeout, verify=session.verify, **kwargs)
    except requests.exceptions.SSLError as exc:
        found = _NOT_TRUSTED.search(str(exc))
        if found is None:
            raise TransientError(f"{method} {url}: SSLError") from exc
        why = found.group(1).strip()
        raise ConfigError(
            f"{field}: {method} {url}: TLS certificate not trusted ({why}); {tls_hint}"
        ) from None
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise TransientError(f"{method} {url}: {type(exc).__name__}") from exc
    except requests.RequestException as exc:
        raise ConfigError(f"{field}: {method} {url}: {exc}") from None
    status = response.status_code
    if status == 429 or status >= 500:
        wait = retry_after(response.headers.get("Retry-After"))
        response.close()
        busy = status in (429, 503)
        raise TransientError(f"{method} {url}: HTTP {status}", retry_after=wait, overloaded=busy)
    if status >= 400:
        text = response.text[:200] if quote else "(answer not shown: it may quote the records)"
        response.close()
        raise ConfigError(f"{field}: {method} {url}: HTTP {status}: {text}")
    return response


def json_body(response: requests.Response, *, field: str) -> Any:
    """The response's JSON body; ConfigError when it is not JSON."""
    try:
        return response.json()
    except ValueError:
        raise ConfigError(
            f"{field}: {response.request.method} {response.url} did not answer JSON "
            f"(got {response.headers.get('Content-Type', 'no content type')})"
        ) from None
    finally:
        response.close()


def dig(value: Any, path: str | None) -> Any:
    """The value at dotted `path` inside nested dicts (None when absent)."""
    if not path:
        return value
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
