"""Who may call a local server: whoever holds its key (there is no Kubernetes to ask).

`longrun batch-api --local` makes a random key (or reads `--api-key-file`) and writes it to a
file only its user can read, as `longrun serve` does for a model server's key; a request with
that key is the user `local`, allowed everything in every namespace. Any other key is a token
the server does not accept (401, or 404 on an id, as in a cluster).
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from typing import Any

LOCAL_USER = {"username": "local", "groups": ["system:authenticated"]}


def key_from(path: Path, *, create: bool) -> str:
    """The key in `path`; a new one written there (mode 0600) when `create` and it is absent."""
    if path.exists():
        key = path.read_text().strip()
        if not key:
            raise ValueError(f"{path}: the key file is empty")
        return key
    if not create:
        raise ValueError(f"{path}: no such key file")
    path.parent.mkdir(parents=True, exist_ok=True)
    key = "sk-local-" + secrets.token_hex(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


class LocalReviews:
    """`batchapi.ports.Reviews` for one key."""

    def __init__(self, key: str) -> None:
        self._key = key.encode()

    def review_token(self, token: str) -> dict[str, Any] | None:
        return dict(LOCAL_USER) if hmac.compare_digest(token.encode(), self._key) else None

    def review_access(self, user: dict[str, Any], *, namespace: str, verb: str, name: str) -> bool:
        return user.get("username") == LOCAL_USER["username"]
