"""How `longrun-fetch` writes the cache: `DEST.partial`, resumed, checked, renamed into place.

A fetch writes into `DEST.partial` (a file, or a directory for a directory source) and
renames it to DEST only when every file is there and checked, then writes the marker
`DEST.longrun-complete`: a half-written model never looks complete.

A fetch that fails (a restarted init container, a retried transient error) leaves
`DEST.partial` for the next attempt, with `DEST.partial.source` saying what it is a part of:
the source, its version (a Hugging Face commit), the sha256 asked for and the patterns. The
next attempt at the same thing keeps it: a file already whole is checked and kept, a shorter
one is continued from its end (the opener's offset: an HTTP Range, an S3 range, a seek), and
its digest is computed over the bytes kept plus the bytes read. Anything else (another
source, a moved branch, a file longer than the source says) starts over. A file that does not
match what its source says (size, SHA-256, git blob id) is removed and fails the fetch with
exit code 3; a refusal (the size cap, a denied address) removes the whole partial download.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
from pathlib import Path

from runners.api import ConfigError
from runners.fetch_base import (
    CHUNK,
    EXIT_MISMATCH,
    EXIT_USAGE,
    Fetch,
    FetchError,
    Planned,
    RemoteFile,
    retrying,
)

MARKER = ".longrun-complete"
PARTIAL = ".partial"


def marker_of(dest: Path) -> Path:
    """The marker written next to DEST after a successful fetch."""
    return dest.with_name(dest.name + MARKER)


def is_complete(dest: Path, sha256: str | None, *, is_dir: bool) -> bool:
    """True when DEST needs no fetch: its digest matches, or its marker is there."""
    if sha256 is not None and not is_dir:
        return dest.is_file() and digest_of(dest) == sha256
    return marker_of(dest).exists() and (dest.is_dir() if is_dir else dest.is_file())


def digest_of(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    hashed = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            hashed.update(block)
    return hashed.hexdigest()


def remove(path: Path) -> None:
    """Remove a file or a directory tree, if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def download_all(fetch: Fetch, planned: Planned, *, is_dir: bool) -> None:
    """Write every planned file into DEST.partial (resuming what is there for the same
    source and version), check each, then rename into place and mark DEST complete."""
    partial = fetch.dest.with_name(fetch.dest.name + PARTIAL)
    record = partial.with_name(partial.name + ".source")
    identity = _identity(fetch, planned)
    if not record.is_file() or record.read_text() != identity:
        remove(partial)
    marker_of(fetch.dest).unlink(missing_ok=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(identity)
    for remote in planned.files:
        target = partial / remote.rel if is_dir else partial
        try:
            retrying(functools.partial(_write, target, remote, fetch))
        except ConfigError:
            _forget(partial, record)  # a refusal: nothing of it stays in the cache
            raise
        except FetchError as exc:
            # A refusal, or a single file that is not what was asked: nothing stays. A
            # directory keeps its other files for the next attempt.
            if exc.code == EXIT_USAGE or (exc.code == EXIT_MISMATCH and not is_dir):
                _forget(partial, record)
            raise
    remove(fetch.dest)
    partial.rename(fetch.dest)
    record.unlink(missing_ok=True)
    marker_of(fetch.dest).write_text(f"{fetch.source}\n")


def _identity(fetch: Fetch, planned: Planned) -> str:
    what = {
        "source": fetch.source,
        "version": planned.version,
        "sha256": fetch.sha256,
        "include": list(fetch.include),
        "exclude": list(fetch.exclude),
    }
    return json.dumps(what, sort_keys=True)


def _forget(partial: Path, record: Path) -> None:
    remove(partial)
    record.unlink(missing_ok=True)


def _write(target: Path, remote: RemoteFile, fetch: Fetch) -> None:
    """Fetch one file into `target`, from where an earlier attempt stopped, and check it.
    Its bytes count against the fetch's cap."""
    target.parent.mkdir(parents=True, exist_ok=True)
    have = target.stat().st_size if target.is_file() else 0
    if remote.size is not None and have > remote.size:
        have = 0  # longer than the source says: not a part of it
    check = _Digests(remote.size if remote.git_sha1 else None)
    if have:
        with target.open("rb") as kept:
            while block := kept.read(CHUNK):
                check.update(block)
    where = f"{fetch.source.rstrip('/')}/{remote.rel}" if remote.rel else fetch.source
    written = have
    if remote.size is None or have < remote.size:
        with target.open("ab" if have else "wb") as out:
            for block in remote.open(have):
                written += len(block)
                fetch.cap.check(written, where)
                check.update(block)
                out.write(block)
    fetch.cap.commit(written)
    if problem := check.problem(remote, fetch, written):
        target.unlink(missing_ok=True)
        raise FetchError(EXIT_MISMATCH, f"{where}: {problem}")


class _Digests:
    """The SHA-256 of a file, and its git blob id when its size is known up front."""

    def __init__(self, git_size: int | None) -> None:
        self.sha256 = hashlib.sha256()
        self.git = None
        if git_size is not None:
            self.git = hashlib.sha1(usedforsecurity=False)
            self.git.update(f"blob {git_size}\0".encode())

    def update(self, block: bytes) -> None:
        self.sha256.update(block)
        if self.git is not None:
            self.git.update(block)

    def problem(self, remote: RemoteFile, fetch: Fetch, size: int) -> str | None:
        """Why the file is not what its source (or --sha256) says, or None."""
        digest = self.sha256.hexdigest()
        if remote.size is not None and size != remote.size:
            return f"{size} bytes, the source says {remote.size}"
        wanted = remote.sha256 or (fetch.sha256 if not remote.rel else None)
        if wanted is not None and digest != wanted:
            return f"sha256 is {digest}, expected {wanted}"
        if self.git is not None and remote.git_sha1 and self.git.hexdigest() != remote.git_sha1:
            return f"git blob id is {self.git.hexdigest()}, the hub says {remote.git_sha1}"
        return None
