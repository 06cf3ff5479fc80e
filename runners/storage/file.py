"""`file`: CSV, JSONL or Parquet on a volume mounted into the runner pod.

Input is a file, or a directory whose files are read in name order (positions
continue across files; Parquet files by row group, runners/parquet.py). Output is
a directory with one file per chunk, `part-<index:06d>.<ext>`, plus `_SUCCESS`
(a JSON manifest) at the end.

Atomicity rests on POSIX rename: a chunk is written to a hidden temporary file
in the same directory, fsync'ed, renamed into place, and the directory is
fsync'ed, so a reader (or a restarted pod) sees the whole chunk or nothing.
Writing an existing chunk again replaces it with identical content. The pods of a run shared
by several (runners/shards.py) write their own chunks into the one directory, each with
temporaries of its own.

A directory belongs to one run and Job: the first sink claims it with a `_RUN`
marker (runners/storage/owners.py); another run's sink is refused, so every part
file a sink lists is its own run's.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from contracts.storage import FileStorage
from contracts.storage_fields import PARQUET
from runners.api import (
    ConfigError,
    ErrorRecord,
    InputRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
)
from runners.chunkcodec import ChunkCodec
from runners.formats import TEXT_ENCODING, count_positions, guess_format
from runners.reading import read_part
from runners.storage.owners import MARKER, Owner, refusal

MANIFEST = "_SUCCESS"
_TMP_PREFIX = ".tmp-"


class FileBackend(StorageBackend):
    """StorageBackend for kind `file`."""

    def open_source(self, settings: FileStorage, ctx: RunContext) -> FileSource:
        """A source over a file or a directory of files."""
        return FileSource(settings)

    def open_sink(self, settings: FileStorage, ctx: RunContext, *, role: str) -> FileSink:
        """A directory sink; created if absent."""
        return FileSink(settings, ctx, role=role)

    def error_settings(self, settings: FileStorage) -> FileStorage:
        """Default error output: the sibling directory `<path>-errors`."""
        return settings.model_copy(update={"path": settings.path.rstrip("/") + "-errors"})


class FileSource(Source):
    """Records from one file or every file of a directory, in name order."""

    def __init__(self, settings: FileStorage) -> None:
        self.settings = settings
        root = Path(settings.path)
        if root.is_dir():
            self.files = sorted(p for p in root.iterdir() if p.is_file() and _is_data(p.name))
        elif root.is_file():
            self.files = [root]
        else:
            raise ConfigError(f"path: {root} does not exist (is the volume mounted?)")

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        """Records with position >= skip; positions continue across files."""
        start = 0
        for path in self.files:
            start += yield from read_part(
                path,
                guess_format(path.name, self.settings.format),
                lines=_text,
                binary=Path,  # pyarrow reads the file itself
                where=f"path: {path}",
                start=start,
                skip=skip,
                id_field=self.settings.id_field,
                record_field=self.settings.record_field,
            )

    def total(self) -> int | None:
        """How many positions the files hold: one pass, JSON left undecoded (CSV rows parsed,
        as a quoted field may span lines; Parquet footers read); on the progress thread, with
        its own file handles."""
        count = 0
        for path in self.files:
            fmt = guess_format(path.name, self.settings.format)
            if fmt == PARQUET:
                from runners import parquet

                count += parquet.count_rows(path, where=f"path: {path}")
                continue
            with path.open(encoding=TEXT_ENCODING, newline="") as handle:
                count += count_positions(handle, fmt=fmt)
        return count

    def close(self) -> None:
        """Nothing to close: files are closed as they are finished."""


def _text(path: Path) -> IO[str]:
    return path.open(encoding=TEXT_ENCODING, newline="")


def _is_data(name: str) -> bool:
    return not name.startswith((".", "_"))


class FileSink(Sink):
    """One file per chunk in a directory, written by atomic rename."""

    counts_committed = True  # its chunk files say what it holds

    def __init__(self, settings: FileStorage, ctx: RunContext, *, role: str) -> None:
        self.dir = Path(ctx.execution_subpath(settings.path))
        self.codec = ChunkCodec.of(settings, ctx, role=role)
        self.ext = self.codec.extension
        self.ctx = ctx
        self.role = role
        self.location = str(self.dir)
        # Each pod of a run shared by several has temporaries of its own: it clears only them.
        self._tmp = _TMP_PREFIX + (f"i{ctx.shard_index}-" if ctx.shard_count > 1 else "")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"path: cannot create {self.dir}: {exc.strerror}") from None
        self._remove_temporaries()
        self._claim(Owner.of(ctx, role))

    def chunk_path(self, index: int) -> Path:
        """Where chunk `index` lives."""
        return self.dir / f"part-{index:06d}.{self.ext}"

    def committed(self) -> set[int]:
        """Indexes of the chunk files present."""
        found = set()
        for path in self.dir.glob(f"part-*.{self.ext}"):
            digits = path.name[len("part-") : -len(self.ext) - 1]
            if digits.isdigit():
                found.add(int(digits))
        return found

    def committed_records(self, chunks: set[int]) -> int:
        """Records in the chunk files of `chunks` (read one at a time; absent ones hold 0)."""
        return sum(
            self.codec.count(self.chunk_path(index).read_bytes())
            for index in sorted(chunks & self.committed())
        )

    def committed_usage(self, chunks: set[int]) -> dict[str, int]:
        """Token counts of the usage in the chunk files of `chunks`."""
        tokens: dict[str, int] = {}
        for index in sorted(chunks & self.committed()):
            data = self.chunk_path(index).read_bytes()
            for key, value in self.codec.usage(data).items():
                tokens[key] = tokens.get(key, 0) + value
        return tokens

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """Write chunk `index` atomically (replacing an identical earlier copy)."""
        data = self.codec.encode(records)
        self._atomic_write(self.chunk_path(index), data)

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Write the `_SUCCESS` manifest."""
        manifest = {
            "runUid": self.ctx.run_uid,
            "jobName": self.ctx.job_name,
            "role": self.role,
            "format": self.codec.fmt,
            "committedChunks": sorted(self.committed()),
            **summary,
        }
        self._atomic_write(self.dir / MANIFEST, json.dumps(manifest, sort_keys=True).encode())

    def close(self) -> None:
        """Nothing to close."""

    def _atomic_write(self, target: Path, data: bytes) -> None:
        tmp = self.dir / f"{self._tmp}{target.name}.{os.getpid()}"
        _write_synced(tmp, data)
        os.replace(tmp, target)
        _fsync_dir(self.dir)

    def _claim(self, mine: Owner) -> None:
        """Make the directory this run's, or refuse it (runners/storage/owners.py)."""
        marker = self.dir / MARKER
        if not marker.exists():
            free, earlier = self._earlier_owner()
            if not free and earlier != mine:
                raise refusal(self.location, earlier, field="path")
            try:
                self._create(marker, mine.to_json())
                return
            except FileExistsError:
                pass  # another sink claimed it first: whose is it?
        holder = Owner.from_json(marker.read_bytes())
        if holder != mine:
            raise refusal(self.location, holder, field="path")

    def _earlier_owner(self) -> tuple[bool, Owner | None]:
        """(free, owner) of a directory without a marker: an older longrun's output names its
        run in `_SUCCESS`; part files without one belong to nobody known."""
        manifest = self.dir / MANIFEST
        if manifest.exists():
            return False, Owner.from_json(manifest.read_bytes())
        return not any(self.dir.glob("part-*")), None

    def _create(self, target: Path, data: bytes) -> None:
        """Write `target` whole, only if absent (FileExistsError otherwise)."""
        tmp = self.dir / f"{self._tmp}{target.name}.{os.getpid()}"
        _write_synced(tmp, data)
        try:
            os.link(tmp, target)  # atomic create-if-absent, content complete
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.ENOSYS, errno.EXDEV):
                raise
            with target.open("xb") as handle:  # a filesystem without hard links
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(self.dir)

    def _remove_temporaries(self) -> None:
        # Left by a killed pod: never visible as chunks, safe to delete.
        for path in self.dir.glob(f"{self._tmp}*"):
            path.unlink(missing_ok=True)


def _write_synced(path: Path, data: bytes) -> None:
    with path.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
