"""Hugging Face sources of `longrun-fetch`: one file, or a whole repository snapshot.

`hf://org/repo/file[@revision]` is one file, `{HF_ENDPOINT}/{repo}/resolve/{revision}/{file}`.
`hf://org/repo[@revision]` is the repository at that revision (default `main`), as
huggingface_hub's `snapshot_download` takes it:

1. `GET {HF_ENDPOINT}/api/models/{repo}/revision/{revision}?blobs=true` names the commit the
   revision points at (`sha`) and every file (`siblings`: `rfilename`, `size`, `blobId`, and
   for a file stored in LFS, `lfs.sha256`);
2. the files matching `--include` and none of `--exclude` are downloaded from that commit, not
   from the revision's name, so a branch that moves during the download never mixes two
   versions; the commit is also what a partial download is resumed for (fetch.py);
3. each file is checked against what the hub said: its size, and its SHA-256 (LFS files:
   weights) or its git blob id (the SHA-1 of `blob <size>\\0<bytes>`: config and tokenizer
   files). A file that does not match fails the fetch with exit code 3.

`HF_TOKEN` is sent as `Authorization: Bearer` to the endpoint's origin only (fetch_net.py
drops it on a redirect to the CDN). Every request goes through the same guard, redirect rule
and size cap as the other sources; the sum of the listed sizes is checked against the cap
before anything is written.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from runners.fetch_base import (
    EXIT_TRANSIENT,
    EXIT_USAGE,
    Fetch,
    FetchError,
    Planned,
    RemoteFile,
    retrying,
)
from runners.fetch_sources import HF, http_stream, safe_rel

DEFAULT_HF = "https://huggingface.co"


def hf_plan(fetch: Fetch, rest: str) -> Planned:
    """The file, or the repository's files at the revision's commit."""
    found = HF.match(rest)
    if found is None:
        raise FetchError(EXIT_USAGE, f"unsupported source {fetch.source!r}")
    base = (fetch.env.get("HF_ENDPOINT") or DEFAULT_HF).rstrip("/")
    repo, revision = found["repo"], found["rev"] or "main"
    token = fetch.secret("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def remote(rel: str, path: str, commit: str, sibling: dict[str, Any]) -> RemoteFile:
        url = f"{base}/{repo}/resolve/{quote(commit, safe='')}/{quote(path)}"
        lfs = sibling.get("lfs") or {}
        return RemoteFile(
            rel,
            lambda at: http_stream(fetch, url, headers, at),
            size=_int(lfs.get("size", sibling.get("size"))),
            sha256=_hex(lfs.get("sha256"), 64),
            git_sha1=None if lfs else _hex(sibling.get("blobId"), 40),
        )

    if found["path"]:
        return Planned([remote("", found["path"], revision, {})])
    info = _repo_info(fetch, f"{base}/api/models/{repo}/revision/{quote(revision, safe='')}")
    commit = str(info.get("sha") or revision)
    files = [
        remote(rel, rel, commit, sibling)
        for sibling in info["siblings"]
        if fetch.wants(rel := safe_rel(str(sibling["rfilename"])))
    ]
    if not files:
        raise FetchError(
            EXIT_USAGE,
            f"{fetch.source}: no file of the repository matches include/exclude "
            f"({len(info['siblings'])} files at {commit})",
        )
    fetch.cap.check(sum(f.size or 0 for f in files), fetch.source)
    return Planned(files, version=commit)


def _repo_info(fetch: Fetch, url: str) -> dict[str, Any]:
    token = fetch.secret("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    listing = f"{url}?blobs=true"
    body = retrying(lambda: b"".join(http_stream(fetch, listing, headers)).decode())
    try:
        info = json.loads(body)
        siblings = info.get("siblings")
        if not isinstance(siblings, list) or not all(
            isinstance(s, dict) and "rfilename" in s for s in siblings
        ):
            raise ValueError("no siblings")
        return dict(info)
    except (ValueError, AttributeError):
        raise FetchError(EXIT_TRANSIENT, f"{url}: not a file list") from None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _hex(value: object, length: int) -> str | None:
    if isinstance(value, str) and len(value) == length:
        try:
            int(value, 16)
        except ValueError:
            return None
        return value.lower()
    return None
