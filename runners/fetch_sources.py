"""Where `longrun-fetch` (runners/fetch.py) reads a model from: s3, https, hf and local files.

runners/fetch.py is the command: its arguments, the cache (sha256, the completion marker,
DEST.partial renamed into place) and the pvc:// source, which is mostly cache logic. This
module is the other half: for each remote source, the list of files to fetch as (relative
path, opener) pairs, with each library's errors (requests, boto3) turned into a
`FetchError` with an exit code. They are kept apart so the cache logic reads without the
details of three network protocols, and those can change without touching it. The
vocabulary both halves share (`Fetch`, `FetchError`, the exit codes, retrying) lives here,
at the bottom, so that neither module imports the other in a cycle.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

EXIT_OK, EXIT_USAGE, EXIT_MISMATCH, EXIT_NOT_FOUND, EXIT_TRANSIENT = 0, 2, 3, 4, 5
CHUNK = 1 << 20
ATTEMPTS = 3
DEFAULT_HF = "https://huggingface.co"
T = TypeVar("T")
_HF = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(/(?P<path>[^@\s]+))?(@(?P<rev>[\w./-]+))?$")


class FetchError(Exception):
    """A failure with its exit code; the message is what the termination log says."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Fetch:
    """One invocation: where from, where to, and how to check and authenticate."""

    source: str
    dest: Path
    sha256: str | None = None
    endpoint_url: str | None = None
    credentials: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def secret(self, name: str) -> str | None:
        """A credential: from the credentials directory, else the environment."""
        return self.credentials.get(name) or self.env.get(name) or None


# (relative path, opener): what `plan` returns, and what fetch.py writes into DEST.partial.
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
        with requests.get(url, headers=headers, stream=True, timeout=(10, 300)) as resp:
            _check_status(resp.status_code, url)
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


def _s3_client(fetch: Fetch) -> Any:
    import boto3

    keys = {
        "aws_access_key_id": fetch.secret("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": fetch.secret("AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": fetch.secret("AWS_SESSION_TOKEN"),
    }
    return boto3.client("s3", endpoint_url=fetch.endpoint_url, **keys)


def _s3_plan(fetch: Fetch, rest: str) -> list[tuple[str, Opener]]:
    bucket, _, key = rest.partition("/")
    client = _s3_client(fetch)
    if not key.endswith("/"):
        return [("", lambda: _s3_stream(client, bucket, key))]
    keys = [k for k in retrying(lambda: _s3_list(client, bucket, key)) if not k.endswith("/")]
    if not keys:
        raise FetchError(EXIT_NOT_FOUND, f"s3://{bucket}/{key}: no objects under the prefix")
    return [(_safe_rel(k[len(key) :]), _s3_opener(client, bucket, k)) for k in keys]


def _s3_opener(client: Any, bucket: str, key: str) -> Opener:
    return lambda: _s3_stream(client, bucket, key)


def _s3_list(client: Any, bucket: str, prefix: str) -> list[str]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents") or []]
    except ClientError as exc:
        raise _s3_error(exc, f"s3://{bucket}/{prefix}") from None
    except BotoCoreError as exc:
        raise FetchError(EXIT_TRANSIENT, f"s3://{bucket}/{prefix}: {type(exc).__name__}") from None


def _s3_stream(client: Any, bucket: str, key: str) -> Iterator[bytes]:
    from botocore.exceptions import BotoCoreError, ClientError

    where = f"s3://{bucket}/{key}"
    try:
        body: IO[bytes] = client.get_object(Bucket=bucket, Key=key)["Body"]
        while block := body.read(CHUNK):
            yield block
    except ClientError as exc:
        raise _s3_error(exc, where) from None
    except BotoCoreError as exc:
        raise FetchError(EXIT_TRANSIENT, f"{where}: {type(exc).__name__}") from None


def _s3_error(exc: Any, where: str) -> FetchError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code in ("NoSuchKey", "NoSuchBucket", "AccessDenied", "404", "403") or status in (403, 404):
        return FetchError(EXIT_NOT_FOUND, f"{where}: {code or status} (not found or access denied)")
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
