"""Where files live: the store protocol, a file's metadata, and the directory store.

A file is two things in a store: its content and its metadata (`<ns>/files/<id>.json`). The
metadata is written last, in one atomic step, and only files with metadata exist: an upload
cut short (the client gone, the server killed, over the size limit) leaves at most content
nobody lists, which `sweep` removes later. Deleting removes the metadata first.

Content is either the uploaded bytes (`<ns>/files/<id>.jsonl`) or, for the output and error
files of a batch, the part files its run wrote (`<ns>/batches/<batch>/output/part-*.jsonl`,
`.../errors/part-*.jsonl`): read in name order, they are one file.

Every key starts with the namespace, so a tenant's ids never reach another's files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

READ_SIZE = 1024 * 1024
PART = re.compile(r"^part-[0-9][-0-9]*\.jsonl$")  # what runners write (runners/storage/file.py)
STALE_SECONDS = 3600  # an unfinished upload older than this is left over from a crash


@dataclass
class FileMeta:
    """A file's OpenAI fields, where its content is, and (uploads) what the check found."""

    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    expires_at: int | None = None
    parts: str | None = None  # output/error files: the directory or prefix of the parts
    check: dict[str, Any] | None = None  # uploads: batchapi.lines.FileCheck.wire()
    extra: dict[str, Any] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        """The stored JSON."""
        data = {k: v for k, v in self.__dict__.items() if k != "extra" and v is not None}
        return {**self.extra, **data}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> FileMeta:
        """Read stored JSON back."""
        known = {"id", "bytes", "created_at", "filename", "purpose", "expires_at", "parts", "check"}
        kept = {k: v for k, v in data.items() if k in known}
        return cls(**kept, extra={k: v for k, v in data.items() if k not in known})

    def openai(self) -> dict[str, Any]:
        """The File object the clients read (openai.types.FileObject)."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": self.expires_at,
            "status_details": None,
        }


class Upload(Protocol):
    """Content being written: `write` pieces, then `commit` (or `abort`)."""

    def write(self, data: bytes) -> None: ...

    def commit(self) -> None:
        """Make the content whole under its key (still unlisted until its metadata exists)."""

    def abort(self) -> None:
        """Remove whatever was written."""


class FileStore(Protocol):
    """The store of uploads and outputs (a directory, or an S3 bucket)."""

    def begin(self, namespace: str, file_id: str) -> Upload:
        """Start writing a file's uploaded content."""

    def put_meta(self, namespace: str, meta: FileMeta) -> None:
        """Write (or rewrite) a file's metadata: from then on the file exists."""

    def get_meta(self, namespace: str, file_id: str) -> FileMeta | None:
        """A file's metadata, None when it does not exist."""

    def list_ids(self, namespace: str) -> list[str]:
        """Ids of the files of a namespace that have metadata, in no particular order."""

    def delete(self, namespace: str, meta: FileMeta) -> None:
        """Remove a file: its metadata first, then its content."""

    def size_and_chunks(self, namespace: str, meta: FileMeta) -> tuple[int, Iterator[bytes]]:
        """The content's size now, and its bytes in pieces."""

    def count_parts(self, location: str) -> tuple[int, int]:
        """(lines, bytes) of the part files under a batch output location (read through)."""

    def runner_input(self, namespace: str, file_id: str) -> dict[str, Any]:
        """The InferenceConfig storage block that reads an uploaded file as openai-batch."""

    def runner_output(self, location: str) -> dict[str, Any]:
        """The InferenceConfig storage block that writes parts into a batch output location."""

    def location(self, namespace: str, batch_id: str, role: str) -> str:
        """Where a batch's `output` or `errors` parts go (a store-specific string)."""

    def sweep(self, *, now: float) -> int:
        """Remove what unfinished uploads left behind; how many things were removed."""


def content_key(namespace: str, file_id: str) -> str:
    return f"{namespace}/files/{file_id}.jsonl"


def meta_key(namespace: str, file_id: str) -> str:
    return f"{namespace}/files/{file_id}.json"


def location_key(namespace: str, batch_id: str, role: str) -> str:
    return f"{namespace}/batches/{batch_id}/{role}"


class DirectoryStore:
    """Files in a directory: a PersistentVolumeClaim mounted in the server and in runner pods
    at the same path (`claim`), or, on one machine, a plain directory."""

    def __init__(self, root: Path, *, claim: str | None = None) -> None:
        self.root = root.resolve()
        self.claim = claim
        self.root.mkdir(parents=True, exist_ok=True)

    def begin(self, namespace: str, file_id: str) -> Upload:
        return _DirectoryUpload(self.root, self.root / content_key(namespace, file_id))

    def put_meta(self, namespace: str, meta: FileMeta) -> None:
        target = self.root / meta_key(namespace, meta.id)
        _atomic_write(target, json.dumps(meta.wire(), sort_keys=True).encode())

    def get_meta(self, namespace: str, file_id: str) -> FileMeta | None:
        try:
            data = json.loads((self.root / meta_key(namespace, file_id)).read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            return None
        return FileMeta.from_wire(data)

    def list_ids(self, namespace: str) -> list[str]:
        folder = self.root / namespace / "files"
        if not folder.is_dir():
            return []
        return [p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json")]

    def delete(self, namespace: str, meta: FileMeta) -> None:
        (self.root / meta_key(namespace, meta.id)).unlink(missing_ok=True)
        if meta.parts is not None:
            shutil.rmtree(self.root / meta.parts, ignore_errors=True)
        else:
            (self.root / content_key(namespace, meta.id)).unlink(missing_ok=True)

    def size_and_chunks(self, namespace: str, meta: FileMeta) -> tuple[int, Iterator[bytes]]:
        if meta.parts is None:
            paths = [self.root / content_key(namespace, meta.id)]
        else:
            paths = _parts(self.root / meta.parts)
        sizes = [_size(p) for p in paths]
        return sum(sizes), _read_all(paths, sizes)

    def count_parts(self, location: str) -> tuple[int, int]:
        paths = _parts(self.root / location)
        return count_lines(_read_all(paths, [_size(p) for p in paths]))

    def runner_input(self, namespace: str, file_id: str) -> dict[str, Any]:
        path = self.root / content_key(namespace, file_id)
        return {"file": {"path": str(path), "format": "openai-batch", **self._volume()}}

    def runner_output(self, location: str) -> dict[str, Any]:
        path = self.root / location
        return {"file": {"path": str(path), "format": "openai-batch", **self._volume()}}

    def location(self, namespace: str, batch_id: str, role: str) -> str:
        return location_key(namespace, batch_id, role)

    def _volume(self) -> dict[str, str]:
        return {"volume": self.claim, "mountPath": str(self.root)} if self.claim else {}

    def sweep(self, *, now: float) -> int:
        removed = 0
        for folder in self.root.glob("*/files"):
            metas = {p.name[: -len(".json")] for p in folder.glob("*.json")}
            for path in folder.iterdir():
                stale = now - _mtime(path) > STALE_SECONDS
                orphan = path.suffix == ".jsonl" and path.name[: -len(".jsonl")] not in metas
                if stale and (path.name.startswith(".upload-") or orphan):
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed


class _DirectoryUpload:
    """A hidden temporary file beside the target, renamed into place on commit."""

    def __init__(self, root: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        self.target = target
        self.tmp = target.with_name(f".upload-{target.name}.{os.getpid()}.{time.monotonic_ns()}")
        self.handle = open(self.tmp, "wb")  # noqa: SIM115 - closed by commit or abort

    def write(self, data: bytes) -> None:
        self.handle.write(data)

    def commit(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.tmp, self.target)

    def abort(self) -> None:
        self.handle.close()
        self.tmp.unlink(missing_ok=True)


def _atomic_write(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".upload-{target.name}.{os.getpid()}.{time.monotonic_ns()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)


def count_lines(chunks: Iterator[bytes]) -> tuple[int, int]:
    """(non-empty lines, bytes) of a stream of JSONL pieces."""
    lines = size = 0
    in_line = False
    for chunk in chunks:
        size += len(chunk)
        pieces = chunk.split(b"\n")
        for index, piece in enumerate(pieces):
            in_line = in_line or bool(piece)
            if index < len(pieces) - 1 and in_line:  # a newline ends this line
                lines += 1
                in_line = False
    return lines + in_line, size


def _parts(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if PART.match(p.name))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return time.time()


def _read_all(paths: list[Path], sizes: list[int]) -> Iterator[bytes]:
    """The bytes of each path, no more than its size when listed (a part is never rewritten
    with other content, so the listed size is the content)."""
    for path, size in zip(paths, sizes, strict=True):
        left = size
        with open(path, "rb") as handle:
            while left > 0:
                data = handle.read(min(READ_SIZE, left))
                if not data:
                    break
                left -= len(data)
                yield data
