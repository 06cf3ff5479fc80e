"""The vocabulary the parts of `longrun-fetch` share: one invocation (`Fetch`), its failure
(`FetchError` and the exit codes), the size cap, and retrying.

`longrun-fetch` is four modules: runners/fetch.py (the command, the cache, pvc://),
runners/fetch_sources.py (s3 and https: the files to fetch), runners/fetch_hf.py (Hugging Face
repositories: their file lists and hashes), runners/fetch_net.py (where it may connect and be
redirected, how much it may write, which AWS credentials it may use).
What all three need lives here, at the bottom, so that none imports another in a cycle.
"""

from __future__ import annotations

import fnmatch
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
    include: tuple[str, ...] = ()  # a directory: only the files matching one of these globs
    exclude: tuple[str, ...] = ()  # ... and none of these

    def secret(self, name: str) -> str | None:
        """A credential: from the credentials directory, else the environment."""
        return self.credentials.get(name) or self.env.get(name) or None

    def wants(self, rel: str) -> bool:
        """Whether a directory's file `rel` is fetched: it matches an include pattern (or there
        is none) and no exclude pattern. As huggingface_hub's allow/ignore patterns: globs on
        the path, and a pattern ending in / takes everything under it."""
        return (not self.include or _matches(rel, self.include)) and not _matches(rel, self.exclude)


def _matches(rel: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(rel, p + "*" if p.endswith("/") else p) for p in patterns)


# Reads a file's bytes from an offset on (0: the whole file): what fetch.py resumes with.
Opener = Callable[[int], Iterator[bytes]]


@dataclass(frozen=True)
class RemoteFile:
    """One file a source plans: where it goes under DEST ('' for a single-file source), how
    to read it, and what its source says it is (to resume and to check it)."""

    rel: str
    open: Opener
    size: int | None = None
    sha256: str | None = None  # Hugging Face: an LFS file's SHA-256
    git_sha1: str | None = None  # Hugging Face: a plain file's git blob id


@dataclass(frozen=True)
class Planned:
    """A source's files, and what names this version of them (a Hugging Face commit): a
    partial download of another version is not resumed."""

    files: list[RemoteFile]
    version: str = ""


def skip(blocks: Iterator[bytes], count: int) -> Iterator[bytes]:
    """`blocks` without their first `count` bytes (a server that ignored a Range request)."""
    for block in blocks:
        if count >= len(block):
            count -= len(block)
            continue
        yield block[count:]
        count = 0


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
