"""`longrun-fetch`: put a model into the cache once, for a ModelDeployment's init container.

    longrun-fetch SOURCE DEST [--sha256 HEX] [--endpoint-url URL] [--credentials-dir DIR]
                  [--denied-cidrs CIDR,...] [--max-size SIZE] [--redirect-hosts GLOB,...]
                  [--allow-instance-metadata] [--include GLOB]... [--exclude GLOB]...

The controller renders this command line (controller/core/serving/builders.py,
`fetch_container`); docs/serving.md documents it. SOURCE is a Model's URI:

- `s3://bucket/key` (one object) or `s3://bucket/prefix/` (every object under it), with
  boto3 (`--endpoint-url` for MinIO and other S3-compatible stores);
- `https://host/path` (or `http://` with `--sha256`), with requests; `BEARER_TOKEN` sends
  `Authorization: Bearer`; a private CA comes from `REQUESTS_CA_BUNDLE` / `SSL_CERT_FILE`;
- `hf://org/repo/file[@revision]` (one file) or `hf://org/repo[@revision]` (the repository
  snapshot at the revision's commit, each file checked against the hub's SHA-256 or git blob
  id: runners/fetch_hf.py), through `HF_ENDPOINT` (default https://huggingface.co);
  `HF_TOKEN` is sent;
- `pvc://claim/path`: the claim is mounted at `$LONGRUN_PVC_ROOT/claim` (default
  /mnt/source/claim). When DEST is that path the model is used in place and only checked;
  otherwise it is copied to DEST.

What makes it safe to run on every pod start:
- a DEST that is complete is kept: with `--sha256` when its digest matches, without when
  the marker `DEST.longrun-complete`, written after a successful fetch, is there;
- downloads go to `DEST.partial` and are renamed into place, so a crash never leaves a half
  file that looks complete;
- a `DEST.partial` left by an earlier attempt at the same source (and, for a Hugging Face
  repository, the same commit and patterns: `DEST.partial.source` says which) is resumed: a
  file already whole and checked is kept, a shorter one is continued with an HTTP Range (an
  S3 range, a seek) from where it stopped;
- transient errors are retried a few times with backoff before giving up, each retry
  resuming where the last one stopped.

A directory source takes only the files matching one of the `--include` globs (all without
one) and none of the `--exclude` globs (on the path inside the directory; a pattern ending
in `/` takes what is under it), as the Model's `include` and `exclude` say.

What keeps it from reaching past the model (runners/fetch_net.py, issue 26): no connection
to `--denied-cidrs` (the controller's DENIED_CIDRS), redirects only within the source's
origin or, over https, to `--redirect-hosts`; at most `--max-size` bytes written (the
deployment's cache size); for s3:// without keys, never the node's instance role unless
`--allow-instance-metadata`.

Credentials are files named like the variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, HF_TOKEN, BEARER_TOKEN) in `--credentials-dir` (a mounted Secret).

Exit codes: 0 done or already there; 2 bad arguments, an unsupported source, or a refusal
(a denied address, a redirect off the source, a model larger than the cap); 3 the sha256
does not match; 4 not found or access denied; 5 a transient network or storage error. A
failure writes a one-line reason (never a credential) to stderr and to the termination log
(`TERMINATION_MESSAGE_PATH`, default /dev/termination-log), which the deployment's status
quotes.

This module is the command and its cache; the remote sources (s3, https, hf) are in
runners/fetch_sources.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from runners.api import ConfigError
from runners.fetch_base import (
    EXIT_MISMATCH,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    Fetch,
    FetchError,
    Planned,
    RemoteFile,
    SizeCap,
)
from runners.fetch_net import endpoint_problem, parse_size, refusal
from runners.fetch_resume import digest_of, download_all, is_complete, marker_of
from runners.fetch_sources import file_opener, is_directory, plan

DEFAULT_PVC_ROOT = "/mnt/source"
__all__ = ["main", "marker_of", "run"]
CREDENTIAL_NAMES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "HF_TOKEN",
    "BEARER_TOKEN",
)
_SOURCE = re.compile(r"^(?P<scheme>s3|hf|https?|pvc)://(?P<rest>.+)$")


# -- entry point -----------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line; argparse exits 2 on a usage error."""
    parser = argparse.ArgumentParser(
        prog="longrun-fetch", description="Put a model into the cache once (an init container)."
    )
    parser.add_argument("source", help="s3://, hf://, https:// or pvc:// URI")
    parser.add_argument("dest", help="the file (or directory, for a directory source) to fill")
    parser.add_argument("--sha256", default=None, help="expected SHA-256 of the file")
    parser.add_argument("--endpoint-url", default=None, help="S3-compatible endpoint")
    parser.add_argument("--credentials-dir", default=None, help="credential files (a Secret)")
    parser.add_argument(
        "--denied-cidrs", default="", help="networks never connected to (comma-separated CIDRs)"
    )
    parser.add_argument("--max-size", default=None, help="most bytes written, e.g. 20Gi")
    parser.add_argument(
        "--redirect-hosts", default="", help="hosts (globs) an https redirect may go to"
    )
    parser.add_argument(
        "--allow-instance-metadata",
        action="store_true",
        help="s3: may use the node's instance role when no keys are given",
    )
    add = parser.add_argument
    add("--include", action="append", default=[], help="a directory: only files matching")
    add("--exclude", action="append", default=[], help="a directory: no file matching")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `longrun-fetch`; returns the exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        fetch = fetch_of(args)
        with _instance_metadata(allowed=fetch.allow_instance_metadata):
            said = run(fetch)
    except ConfigError as exc:  # the network guard's refusal
        return _failed(refusal(exc, args.source))
    except FetchError as exc:
        return _failed(exc)
    print(f"longrun-fetch: {said}", file=sys.stderr)
    return EXIT_OK


def fetch_of(args: argparse.Namespace) -> Fetch:
    """The invocation the arguments describe; FetchError (exit 2) for a bad one."""
    if args.endpoint_url and (problem := endpoint_problem(args.endpoint_url)):
        raise FetchError(EXIT_USAGE, f"--endpoint-url: {problem}")
    return Fetch(
        source=args.source,
        dest=Path(args.dest),
        sha256=_checked_sha(args.sha256),
        endpoint_url=args.endpoint_url,
        credentials=read_credentials(args.credentials_dir),
        env=dict(os.environ),
        denied_cidrs=_listed(args.denied_cidrs),
        redirect_hosts=_listed(args.redirect_hosts),
        allow_instance_metadata=args.allow_instance_metadata,
        cap=_cap(args.max_size),
        include=tuple(args.include),
        exclude=tuple(args.exclude),
    )


def _failed(exc: FetchError) -> int:
    reason = " ".join(str(exc).split())[:400]
    print(f"longrun-fetch: {reason}", file=sys.stderr)
    write_termination_message(f"exit {exc.code}: {reason}")
    return exc.code


def _listed(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _cap(text: str | None) -> SizeCap:
    if text is None:
        return SizeCap()
    try:
        return SizeCap(parse_size(text), text)
    except ValueError as exc:
        raise FetchError(EXIT_USAGE, f"--max-size: {exc}") from None


@contextlib.contextmanager
def _instance_metadata(*, allowed: bool) -> Iterator[None]:
    """AWS_EC2_METADATA_DISABLED=true while fetching, unless allowed: what boto reads besides
    its credential chain (runners/fetch_net.py takes the node's role out of that)."""
    if allowed:
        yield
        return
    before = os.environ.get("AWS_EC2_METADATA_DISABLED")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AWS_EC2_METADATA_DISABLED", None)
        else:
            os.environ["AWS_EC2_METADATA_DISABLED"] = before


def console() -> None:
    """The `longrun-fetch` console script."""
    sys.exit(main())


def _checked_sha(value: str | None) -> str | None:
    if value is None:
        return None
    if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise FetchError(EXIT_USAGE, "--sha256 must be 64 hexadecimal digits")
    return value.lower()


def read_credentials(directory: str | None) -> dict[str, str]:
    """The credential files of a mounted Secret (only the names longrun-fetch reads)."""
    if not directory:
        return {}
    root = Path(directory)
    if not root.is_dir():
        raise FetchError(EXIT_USAGE, f"--credentials-dir {directory} is not a directory")
    found = {}
    for name in CREDENTIAL_NAMES:
        path = root / name
        if path.is_file():
            found[name] = path.read_text().strip()
    return found


def write_termination_message(text: str) -> None:
    """The one-line reason the kubelet reports (best effort)."""
    path = os.environ.get("TERMINATION_MESSAGE_PATH", "/dev/termination-log")
    with contextlib.suppress(OSError):
        Path(path).write_text(text[:4000])


def run(fetch: Fetch) -> str:
    """Fetch (or keep) the model; what was done, in words; FetchError on failure."""
    match = _SOURCE.match(fetch.source)
    if match is None:
        raise FetchError(EXIT_USAGE, f"unsupported source {fetch.source!r}")
    scheme, rest = match["scheme"], match["rest"]
    if scheme == "pvc":
        return _pvc(fetch, rest)
    is_dir = is_directory(scheme, rest)
    if is_dir and fetch.sha256:
        raise FetchError(EXIT_USAGE, "--sha256 checks one file, but the source is a directory")
    if is_complete(fetch.dest, fetch.sha256, is_dir=is_dir):
        return f"{fetch.dest} is already there"
    planned = plan(fetch, scheme, rest)
    download_all(fetch, planned, is_dir=is_dir)
    return f"fetched {fetch.source} into {fetch.dest}"


# -- sources -----------------------------------------------------------------------------------


def _pvc(fetch: Fetch, rest: str) -> str:
    """A model on a mounted claim: checked in place, or copied to DEST."""
    root = Path(fetch.env.get("LONGRUN_PVC_ROOT") or DEFAULT_PVC_ROOT)
    claim, _, path = rest.partition("/")
    if not claim or not path or ".." in Path(path).parts:
        raise FetchError(EXIT_USAGE, f"unsupported source {fetch.source!r}")
    local = root / claim / path
    if not local.exists():
        raise FetchError(EXIT_NOT_FOUND, f"{fetch.source}: not found on the claim ({local})")
    if fetch.sha256 is not None and local.is_dir():
        raise FetchError(EXIT_USAGE, f"--sha256 checks one file, but {fetch.source} is a directory")
    if fetch.sha256 is not None and digest_of(local) != fetch.sha256:
        raise FetchError(EXIT_MISMATCH, f"sha256 of {fetch.source} does not match")
    if fetch.dest.resolve() == local.resolve():
        return f"{fetch.source} is used in place"
    if is_complete(fetch.dest, fetch.sha256, is_dir=local.is_dir()):
        return f"{fetch.dest} is already there"
    files = (
        [
            RemoteFile(rel, file_opener(p))
            for p in sorted(local.rglob("*"))
            if p.is_file() and fetch.wants(rel := str(p.relative_to(local)))
        ]
        if local.is_dir()
        else [RemoteFile("", file_opener(local))]
    )
    download_all(fetch, Planned(files), is_dir=local.is_dir())
    return f"copied {fetch.source} into {fetch.dest}"


if __name__ == "__main__":
    sys.exit(main())
