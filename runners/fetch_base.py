"""The vocabulary the parts of `longrun-fetch` share: one invocation (`Fetch`), its failure
(`FetchError` and the exit codes), the size cap, and retrying.

`longrun-fetch` is three modules: runners/fetch.py (the command, the cache, pvc://),
runners/fetch_sources.py (s3, https and hf: the files to fetch), runners/fetch_net.py (where
it may connect and be redirected, how much it may write, which AWS credentials it may use).
What all three need lives here, at the bottom, so that none imports another in a cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

EXIT_OK, EXIT_USAGE, EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_TRANSIENT = 0, 2, 3, 4, 5
CHUNK = 1 << 20
ATTEMPTS = 3
T = TypeVar("T")
SIZE_SETTING = (
    "the deployment's spec.cache.size, or the controller's SERVING_CACHE_SIZE (chart "
    "serving.cacheSize) when it has none"
)


class FetchError(Exception):
    """A failure with its exit code; the message is what the termination log says."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class SizeCap:
    """The bytes a fetch may write in all (None: no cap), and those of the finished files."""

    limit: int | None = None
    shown: str = ""  # the cap as given (`20Gi`)
    done: int = 0

    def check(self, current: int, where: str) -> None:
        """FetchError (exit 2) when `current` more bytes would pass the cap."""
        if self.limit is not None and self.done + current > self.limit:
            raise FetchError(
                EXIT_USAGE,
                f"{where}: the model is larger than the cache allows ({self.shown}, "
                f"{SIZE_SETTING}); raise spec.cache.size",
            )

    def commit(self, size: int) -> None:
        """Count a finished file."""
        self.done += size


@dataclass(frozen=True)
class Fetch:
    """One invocation: where from, where to, how to check and authenticate, and its limits."""

    source: str
    dest: Path
    sha256: str | None = None
    endpoint_url: str | None = None
    credentials: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    denied_cidrs: tuple[str, ...] = ()  # networks never connected to (DENIED_CIDRS)
    redirect_hosts: tuple[str, ...] = ()  # hosts (globs) an https redirect may go to
    allow_instance_metadata: bool = False  # s3: may the node's instance role be used
    cap: SizeCap = field(default_factory=SizeCap)  # what it may write in all

    def secret(self, name: str) -> str | None:
        """A credential: from the credentials directory, else the environment."""
        return self.credentials.get(name) or self.env.get(name) or None


# (relative path, opener): what a source plans, and what fetch.py writes into DEST.partial.
Opener = Callable[[], Iterator[bytes]]


def retrying(step: Callable[[], T]) -> T:
    """Run `step`, retrying transient failures (exit 5) with backoff."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return step()
        except FetchError as exc:
            if exc.code != EXIT_TRANSIENT or attempt == ATTEMPTS:
                raise
            time.sleep(min(2**attempt, 10) * 0.5)
    raise AssertionError("unreachable")
