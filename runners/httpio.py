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
- any other 4xx is a ConfigError (wrong URL, path, credentials: do not retry);
- a response body that is not JSON is a ConfigError naming the URL.
"""

from __future__ import annotations

import re
from typing import Any

import requests

from runners.api import ConfigError, TransientError
from runners.retry import retry_after


def new_session(headers: dict[str, str], *, verify: bool | str = True) -> requests.Session:
    """A pooled session with default headers (one per sink/source, reused for every call)."""
    session = requests.Session()
    session.headers.update(headers)
    session.verify = verify
    return session


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
    **kwargs: Any,
) -> requests.Response:
    """One request, its failures mapped to TransientError / ConfigError (see module doc).

    `tls_hint` says which setting to fix when the server's certificate is not trusted.
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
        raise TransientError(f"{method} {url}: HTTP {status}", retry_after=wait)
    if status >= 400:
        text = response.text[:200]
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
