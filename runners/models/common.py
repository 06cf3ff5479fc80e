"""What every protocol client needs from the endpoint block: credentials and tensor defaults.

Kept in one place so that the HTTP clients and the gRPC client read credentials the same way
(TLS settings are runners/tls.py's, shared with the storage backends; records become tensor
rows in rows.py). Credential values never appear in messages or logs (runners/redact.py).

Two credentials (`model.auth`): a key from a Secret, read once at construction; or the pod's
ServiceAccount token (`serviceAccountToken`), a file the kubelet rewrites at 80 % of the
token's lifetime. The token is read at construction and read again when the file changed
(its inode, mtime or size: the kubelet swaps a symlink, so the inode moves), looked at with
one `os.stat` at most every CHECK_SECONDS. Per request a client pays one clock read and a
comparison (`Credential.value`), never a file read.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from contracts.auth import MODEL_TOKEN_PATH, MODEL_TOKEN_PATH_ENV
from contracts.model import ModelEndpoint
from runners.api import ConfigError, RunContext
from runners.redact import remember
from runners.secrets import read_secret

DEFAULT_INPUT_NAME = "input-0"
DEFAULT_DATATYPE = "FP32"
CHECK_SECONDS = 5.0
TOKEN_FIELD = "model.auth.serviceAccountToken"


class TokenFile:
    """A token in a file that is replaced while the run goes on; `current()` is cheap."""

    def __init__(
        self,
        path: str,
        *,
        check_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._check_seconds = CHECK_SECONDS if check_seconds is None else check_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._next_check = 0.0
        self._value = ""
        self._reload(first=True)

    def current(self) -> str:
        """The token as last read; the file is looked at again once CHECK_SECONDS passed."""
        if self._clock() >= self._next_check:
            with self._lock:
                if self._clock() >= self._next_check:
                    self._reload(first=False)
        return self._value

    def _reload(self, *, first: bool) -> None:
        """Read the file if it changed. A change the runner cannot read (the kubelet between
        two writes) keeps the last token: it is valid for a fifth of its lifetime yet."""
        self._next_check = self._clock() + self._check_seconds
        try:
            info = os.stat(self.path)
            stamp = (info.st_ino, info.st_mtime_ns, info.st_size)
            if stamp == self._stamp:
                return
            with open(self.path, encoding="utf-8") as handle:
                value = handle.read().strip()
        except OSError as exc:
            if first:
                raise ConfigError(_missing(self.path, str(exc.strerror or exc))) from None
            return
        if not value:
            if first:
                raise ConfigError(_missing(self.path, "the file is empty"))
            return
        self._stamp, self._value = stamp, remember(value)


def _missing(path: str, why: str) -> str:
    return (
        f"{TOKEN_FIELD}: no ServiceAccount token at {path} ({why}); the controller mounts the "
        "runner pod's token there (a projected volume). Run it through an InferenceRun in a "
        "cluster, or authenticate with model.auth.secretRef (a key Secret) instead"
    )


class Credential:
    """The header that carries the key or token, and its value for the next request."""

    def __init__(self, header: str, *, key: str | None = None, token: TokenFile | None = None):
        self.header = header
        self._bearer = header == "Authorization"
        self._token = token
        raw = key if token is None else token.current()
        self._last = (raw, self._format(raw or ""))  # one attribute: threads swap it whole

    @property
    def is_static(self) -> bool:
        """True for a key: its value never changes, so clients may build headers once."""
        return self._token is None

    def value(self) -> str:
        """The header value; the same string object until the token changes."""
        last = self._last
        if self._token is not None:
            raw = self._token.current()
            if raw is not last[0]:
                last = self._last = (raw, self._format(raw))
        return last[1]

    def _format(self, raw: str) -> str:
        return f"Bearer {raw}" if self._bearer else raw


def credential(endpoint: ModelEndpoint, ctx: RunContext) -> Credential | None:
    """How the client authenticates (`model.auth`), or None without `auth`."""
    auth = endpoint.auth
    if auth is None:
        return None
    if auth.secret_ref is not None:
        ref = auth.secret_ref
        key = read_secret(ctx, name=ref.name, key=ref.key, field="model.auth.secretRef")
        return Credential(auth.header, key=key)
    path = os.environ.get(MODEL_TOKEN_PATH_ENV) or MODEL_TOKEN_PATH
    return Credential(auth.header, token=TokenFile(path))
