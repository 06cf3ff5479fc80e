"""Where `longrun-fetch` (runners/fetch.py) reads a model from: s3, https, hf and local files.

runners/fetch.py is the command: its arguments, the cache (sha256, the completion marker,
DEST.partial renamed into place) and the pvc:// source, which is mostly cache logic. This
module is the other half: for each remote source, the list of files to fetch as (relative
path, opener) pairs, with each library's errors (requests, boto3) turned into a
`FetchError` with an exit code. They are kept apart so the cache logic reads without the
details of three network protocols, and those can change without touching it. Where a
download may connect and how much it may write is runners/fetch_net.py's; the vocabulary
all of them share is runners/fetch_base.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from runners.fetch_base import (
    CHUNK,
    EXIT_NOT_FOUND,
    EXIT_TRANSIENT,
    EXIT_USAGE,
    Fetch,
    FetchError,
    Opener,
    retrying,
)
from runners.fetch_net import NO_KEYS_HINT, http_session, s3_client

DEFAULT_HF = "https://huggingface.co"
_HF = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(/(?P<path>[^@\s]+))?(@(?P<rev>[\w./-]+))?$")


def is_directory(scheme: str, rest: str) -> bool:
    """Whether SOURCE names a directory: an s3 prefix, or a whole Hugging Face repo."""
    if scheme == "s3":
        return rest.endswith("/")
    if scheme == "hf":
        found = _HF.match(rest)
        return found is not None and not found["path"]
    return False


# -- sources ---------------------------------------------------------------------------------


def plan(fetch: Fetch, scheme: str, rest: str) -> list[tuple[str, Opener]]:
    """(relative path, opener) of every file to fetch ('' for a single file)."""
    if scheme == "s3":
        return _s3_plan(fetch, rest)
    if scheme == "hf":
        return _hf_plan(fetch, rest)
    return [("", lambda: _http_stream(fetch, fetch.source, _bearer(fetch)))]


def _bearer(fetch: Fetch) -> dict[str, str]:
    token = fetch.secret("BEARER_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def _http_stream(fetch: Fetch, url: str, headers: dict[str, str]) -> Iterator[bytes]:
    import requests

    try:
        with (
            http_session(fetch) as session,
            session.get(url, headers=headers, stream=True, timeout=(10, 300)) as resp,
        ):
            _check_status(resp.status_code, url)
            announced = resp.headers.get("Content-Length", "")
            if announced.isdigit():
                fetch.cap.check(int(announced), url.split("?", 1)[0])
            yield from resp.iter_content(CHUNK)
    except requests.exceptions.SSLError as exc:
        raise FetchError(
            EXIT_NOT_FOUND, f"TLS verification of {_host(url)} failed: {exc}"
        ) from None
    except requests.RequestException as exc:
        raise FetchError(EXIT_TRANSIENT, f"{_host(url)}: {type(exc).__name__}") from None


def _check_status(status: int, url: str) -> None:
    if status < 400:
        return
    where = url.split("?", 1)[0]
    if status in (401, 403, 404, 410):
        raise FetchError(EXIT_NOT_FOUND, f"{where}: HTTP {status} (not found or access denied)")
    if status in (408, 429) or status >= 500:
        raise FetchError(EXIT_TRANSIENT, f"{where}: HTTP {status}")
    raise FetchError(EXIT_USAGE, f"{where}: HTTP {status}")


def _host(url: str) -> str:
    return url.split("//", 1)[-1].split("/", 1)[0]


def _hf_plan(fetch: Fetch, rest: str) -> list[tuple[str, Opener]]:
    found = _HF.match(rest)
    if found is None:
        raise FetchError(EXIT_USAGE, f"unsupported source {fetch.source!r}")
    base = (fetch.env.get("HF_ENDPOINT") or DEFAULT_HF).rstrip("/")
    repo, revision = found["repo"], found["rev"] or "main"
    token = fetch.secret("HF_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    paths = [found["path"]] if found["path"] else _hf_files(fetch, base, repo, revision, headers)

    def opener(path: str) -> Opener:
        url = f"{base}/{repo}/resolve/{revision}/{path}"
        return lambda: _http_stream(fetch, url, headers)

    if found["path"]:
        return [("", opener(found["path"]))]
    return [(path, opener(path)) for path in paths]


def _hf_files(
    fetch: Fetch, base: str, repo: str, revision: str, headers: dict[str, str]
) -> list[str]:
    import json

    url = f"{base}/api/models/{repo}/revision/{revision}"
    body = retrying(lambda: b"".join(_http_stream(fetch, url, headers)).decode())
    try:
        siblings = json.loads(body).get("siblings") or []
        return [_safe_rel(str(item["rfilename"])) for item in siblings]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise FetchError(EXIT_TRANSIENT, f"{url}: not a file list") from None


def _safe_rel(path: str) -> str:
    parts = Path(path).parts
    if not parts or Path(path).is_absolute() or ".." in parts:
        raise FetchError(EXIT_USAGE, f"refusing the file name {path!r}")
    return path


def _s3_plan(fetch: Fetch, rest: str) -> list[tuple[str, Opener]]:
    bucket, _, key = rest.partition("/")
    client = s3_client(fetch)
    if not key.endswith("/"):
        return [("", lambda: _s3_stream(fetch, client, bucket, key))]
    keys = [
        k for k in retrying(lambda: _s3_list(fetch, client, bucket, key)) if not k.endswith("/")
    ]
    if not keys:
        raise FetchError(EXIT_NOT_FOUND, f"s3://{bucket}/{key}: no objects under the prefix")
    return [(_safe_rel(k[len(key) :]), _s3_opener(fetch, client, bucket, k)) for k in keys]


def _s3_opener(fetch: Fetch, client: Any, bucket: str, key: str) -> Opener:
    return lambda: _s3_stream(fetch, client, bucket, key)


def _s3_list(fetch: Fetch, client: Any, bucket: str, prefix: str) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents") or []]
    except ClientError as exc:
        raise _s3_error(exc, f"s3://{bucket}/{prefix}", fetch) from None
    except BotoCoreError as exc:
        raise FetchError(EXIT_TRANSIENT, f"s3://{bucket}/{prefix}: {type(exc).__name__}") from None


def _s3_stream(fetch: Fetch, client: Any, bucket: str, key: str) -> Iterator[bytes]:
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"s3://{bucket}/{key}"
    try:
        answer = client.get_object(Bucket=bucket, Key=key)
        fetch.cap.check(int(answer.get("ContentLength") or 0), where)
        body: IO[bytes] = answer["Body"]
        while block := body.read(CHUNK):
            yield block
    except ClientError as exc:
        raise _s3_error(exc, where, fetch) from None
    except BotoCoreError as exc:
        raise FetchError(EXIT_TRANSIENT, f"{where}: {type(exc).__name__}") from None


def _s3_error(exc: Any, where: str, fetch: Fetch) -> FetchError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code in ("NoSuchKey", "NoSuchBucket", "AccessDenied", "404", "403") or status in (403, 404):
        hint = "" if fetch.secret("AWS_ACCESS_KEY_ID") else f"; {NO_KEYS_HINT}"
        return FetchError(
            EXIT_NOT_FOUND, f"{where}: {code or status} (not found or access denied{hint})"
        )
    return FetchError(EXIT_TRANSIENT, f"{where}: {code or status}")


def file_opener(path: Path) -> Opener:
    def read() -> Iterator[bytes]:
        try:
            with path.open("rb") as handle:
                while block := handle.read(CHUNK):
                    yield block
        except OSError as exc:
            raise FetchError(EXIT_TRANSIENT, f"{path}: {exc.strerror}") from None

    return read
