"""Where `longrun-fetch` may connect, where it may be redirected, how much it may write, and
which AWS credentials it may use (issue 26: it reached anything).

- **Denied networks.** Every connection passes the runner's deny-CIDR guard
  (runners/netguard.py, `--denied-cidrs`: the controller's DENIED_CIDRS): requests through
  its `GuardedAdapter` (each redirect opens its connection through it too), boto3 through its
  `before-send` hook. A download of a metadata address is refused before anything is sent.
- **Redirects** are followed within the source's origin, from http to https on the same
  host, and over https to a host matching `--redirect-hosts` (the chart's default:
  Hugging Face's CDN). Never from https to http, never to another scheme or to a URL with
  `user@`; the `Authorization` header stays with the source's origin.
- **Size.** What is written is capped at `--max-size` (the deployment's `cache.size`, else the
  controller's SERVING_CACHE_SIZE): an announced length over the cap fails before the body is
  read, a body that grows past it stops there, and the partial file is removed.
- **Instance metadata.** Without credentials, an `s3://` download never asks the instance
  metadata service for the node's role unless `--allow-instance-metadata`: the `iam-role`
  provider is taken out of boto's chain (the pod's env also sets AWS_EC2_METADATA_DISABLED).
  The pod's own identity (IRSA, EKS Pod Identity) still works; with no credentials at all,
  requests go unsigned, as a public bucket needs.

Each refusal is a `FetchError` with exit code 2 and one line saying what to change.
"""

from __future__ import annotations

import fnmatch
import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

import requests

from runners.api import ConfigError
from runners.fetch_base import EXIT_USAGE, Fetch, FetchError
from runners.httpio import GuardedAdapter, Origin, origin_of, shown
from runners.netguard import Guard, guard_boto_client

REDIRECT_SETTING = (
    "the controller setting SERVING_FETCH_REDIRECT_HOSTS (chart serving.fetch.redirectHosts)"
)
METADATA_SETTING = (
    "the controller setting SERVING_FETCH_INSTANCE_METADATA "
    "(chart serving.fetch.allowInstanceMetadata)"
)
NO_KEYS_HINT = (
    "no S3 keys were given (the Model's credentials Secret), and the node's instance role is "
    f"not used unless {METADATA_SETTING} allows it"
)
_UNITS = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
_QUANTITY = re.compile(r"^(?P<n>[0-9]+(\.[0-9]+)?)(?P<unit>[KMGTPE]i|[eE][0-9]+|[kMGTPE])?$")


def parse_size(text: str) -> int:
    """Bytes of a Kubernetes quantity (`20Gi`, `500M`, `1e9`); ValueError otherwise."""
    found = _QUANTITY.match(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a size (e.g. 20Gi, 500Mi, 1e9)")
    unit = found["unit"] or ""
    try:
        amount = Decimal(found["n"])
        exponent = unit[1:] if unit[:1] in ("e", "E") and unit[1:].isdigit() else None
        scale = Decimal(10) ** int(exponent) if exponent is not None else _UNITS[unit]
    except (InvalidOperation, KeyError):
        raise ValueError(f"{text!r} is not a size (e.g. 20Gi, 500Mi, 1e9)") from None
    return int(amount * scale)


def guard_of(fetch: Fetch) -> Guard:
    """The deny-CIDR guard of this fetch, worded for a model download."""
    try:
        return Guard.of_cidrs(
            fetch.denied_cidrs,
            who="model downloads (longrun-fetch)",
            remedy="point the Model's source (or endpointUrl) at another address",
        )
    except ValueError as exc:
        raise FetchError(EXIT_USAGE, f"--denied-cidrs: {exc}") from None


def refusal(exc: ConfigError, source: str) -> FetchError:
    """A guard's refusal as the fetch's exit 2, naming the source."""
    return FetchError(EXIT_USAGE, f"{source}: {exc}")


# -- HTTP ------------------------------------------------------------------------------------


class RedirectSession(requests.Session):
    """A session that follows only the redirects this module allows (see its docstring).

    requests calls `rebuild_auth` for every redirect before it sends it: the one place to
    refuse a redirect, and to keep `Authorization` from another origin."""

    def __init__(self, fetch: Fetch) -> None:
        super().__init__()
        self.fetch = fetch

    def rebuild_auth(self, prepared_request: requests.PreparedRequest, response: Any) -> None:
        """Refuse a redirect this fetch may not follow; drop credentials off the origin."""
        origin = origin_of(response.url)
        target = prepared_request.url or ""
        if problem := redirect_problem(response.url, target, self.fetch.redirect_hosts):
            raise FetchError(
                EXIT_USAGE,
                f"{self.fetch.source}: {shown(response.url)} was redirected to {shown(target)}: "
                f"{problem}",
            )
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]
        if origin_of(target) != origin:
            prepared_request.headers.pop("Authorization", None)


def redirect_problem(current: str, target: str, hosts: tuple[str, ...]) -> str | None:
    """Why a redirect from `current` to `target` may not be followed, or None."""
    here, there = origin_of(current), origin_of(target)
    if there is None or urlsplit(target).username is not None:
        scheme = urlsplit(target).scheme or "no"
        return f"a {scheme}:// URL or one with user@ is never followed; set source to its URL"
    if here is not None and here.scheme == "https" and there.scheme == "http":
        return "a redirect from https to http is never followed (the download would lose TLS)"
    if here is None or there == here or _is_upgrade(here, there):
        return None
    if there.scheme == "https" and any(fnmatch.fnmatchcase(there.host, h) for h in hosts):
        return None
    allowed = ", ".join(hosts) if hosts else "none"
    return (
        f"origin {there} is not the source's and its host is not on {REDIRECT_SETTING} "
        f"(now: {allowed}); set source to the new address, or ask the cluster admin to "
        "allow the host"
    )


def _is_upgrade(here: Origin, there: Origin) -> bool:
    return here.scheme == "http" and there.scheme == "https" and here.host == there.host


def http_session(fetch: Fetch) -> requests.Session:
    """A session that connects through the guard and follows only allowed redirects."""
    session = RedirectSession(fetch)
    guard = guard_of(fetch)
    if guard.is_active:
        adapter = GuardedAdapter(guard)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


# -- S3 --------------------------------------------------------------------------------------


def s3_client(fetch: Fetch) -> Any:
    """A boto3 S3 client: the credentials given, else the pod's own identity (never the node's
    instance role unless allowed), else unsigned; every request's host checked by the guard."""
    import boto3
    import botocore.session
    from botocore import UNSIGNED
    from botocore.config import Config

    keys = {
        "aws_access_key_id": fetch.secret("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": fetch.secret("AWS_SECRET_ACCESS_KEY"),
        "aws_session_token": fetch.secret("AWS_SESSION_TOKEN"),
    }
    core = botocore.session.Session()
    if not fetch.allow_instance_metadata:
        core.get_component("credential_provider").remove("iam-role")
    config = None
    if not keys["aws_access_key_id"] and core.get_credentials() is None:
        config = Config(signature_version=UNSIGNED)  # no credentials anywhere: a public bucket
    client = boto3.Session(botocore_session=core).client(
        "s3", endpoint_url=fetch.endpoint_url, config=config, **keys
    )
    guard_boto_client(client, guard_of(fetch))
    return client


def endpoint_problem(url: str) -> str | None:
    """Why `--endpoint-url` is not an S3 endpoint URL, or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL"
    if parts.username is not None:
        return "must not contain credentials (user:password@): put them in the credentials Secret"
    return None
