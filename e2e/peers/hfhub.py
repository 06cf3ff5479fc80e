"""A Hugging Face hub stand-in on 127.0.0.1: what `HF_ENDPOINT` points `longrun-fetch` at.

No test may reach huggingface.co, so the parts of the hub's HTTP API a model download uses
are served here from files in memory, with the hub's own shapes (huggingface_hub's
`model_info(files_metadata=True)` and `hf_hub_download` read the same):

- `GET /api/models/{org}/{repo}/revision/{revision}[?blobs=true]`: `{"id", "sha": <commit>,
  "siblings": [{"rfilename", "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]}`
  (`size`, `blobId` and `lfs` only with `blobs=true`; `lfs` for the files marked LFS, whose
  `blobId` is then the pointer file's, as on the hub);
- `GET /{org}/{repo}/resolve/{revision or commit}/{path}`: the file, with `Range: bytes=N-`
  answered 206 as the hub's CDN does.

A revision is a branch name (`main`, or others given) or the commit itself. Faults for tests:
`cut` names files whose next full-length GET sends half the body and closes the connection
(a dropped download), `tampered` files are served with other bytes than listed, and `seen`
records each request's path and Range header.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


def git_blob_id(data: bytes) -> str:
    """Git's object id of a file: SHA-1 of `blob <size>\\0<bytes>`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    """One repository at one commit: its files, which are in LFS, and its branches."""

    files: Mapping[str, bytes]
    commit: str = "0" * 40
    lfs: frozenset[str] = frozenset()  # paths stored in LFS (weights)
    branches: tuple[str, ...] = ("main",)

    def siblings(self, *, blobs: bool) -> list[dict[str, Any]]:
        """The `siblings` of the revision answer."""
        out = []
        for path, data in sorted(self.files.items()):
            item: dict[str, Any] = {"rfilename": path}
            if blobs:
                item.update(size=len(data), blobId=git_blob_id(data))
                if path in self.lfs:
                    pointer = f"oid sha256:{hashlib.sha256(data).hexdigest()}\n".encode()
                    lfs = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                    item.update(blobId=git_blob_id(pointer), lfs={**lfs, "pointerSize": 130})
            out.append(item)
        return out


@dataclass
class Hub:
    """The repositories served, the faults to inject, and what was asked."""

    repos: dict[str, Repo]
    cut: set[str] = field(default_factory=set)  # "org/repo/path": next full GET dropped halfway
    tampered: dict[str, bytes] = field(default_factory=dict)  # "org/repo/path": bytes served
    seen: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    url: str = ""

    def revision(self, repo: str, revision: str) -> Repo | None:
        found = self.repos.get(repo)
        if found is None or revision not in (*found.branches, found.commit):
            return None
        return found


@contextmanager
def serve_hub(repos: dict[str, Repo]) -> Iterator[Hub]:
    """Serve `repos` (`org/name` → Repo) until the block ends; yields the Hub (`.url`)."""
    hub = Hub(repos)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            hub.seen.append((parts.path, self.headers.get("Range")))
            segments = [unquote(s) for s in parts.path.strip("/").split("/")]
            if segments[:2] == ["api", "models"] and len(segments) == 6:
                self._info(f"{segments[2]}/{segments[3]}", segments[5], "blobs=true" in parts.query)
            elif len(segments) >= 5 and segments[2] == "resolve":
                self._file(f"{segments[0]}/{segments[1]}", segments[3], "/".join(segments[4:]))
            else:
                self._send(404, b'{"error": "not found"}')

        def _info(self, name: str, revision: str, blobs: bool) -> None:
            repo = hub.revision(name, revision)
            if repo is None:
                self._send(404, b'{"error": "Revision Not Found"}')
                return
            body = {"id": name, "sha": repo.commit, "siblings": repo.siblings(blobs=blobs)}
            self._send(200, json.dumps(body).encode())

        def _file(self, name: str, revision: str, path: str) -> None:
            repo = hub.revision(name, revision)
            key = f"{name}/{path}"
            data = hub.tampered.get(key, repo.files.get(path) if repo else None)
            if data is None:
                self._send(404, b"Entry not found")
                return
            wanted = self.headers.get("Range", "")
            start = int(wanted[6:-1]) if wanted.startswith("bytes=") and wanted.endswith("-") else 0
            if key in hub.cut and not start:
                hub.cut.discard(key)
                self._send(200, data, send=data[: len(data) // 2], close=True)
            elif start:
                self._send(
                    206,
                    data[start:],
                    extra={"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"},
                )
            else:
                self._send(200, data)

        def _send(
            self,
            status: int,
            body: bytes,
            *,
            send: bytes | None = None,
            close: bool = False,
            extra: Mapping[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body if send is None else send)
            self.wfile.flush()
            if close:
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler
