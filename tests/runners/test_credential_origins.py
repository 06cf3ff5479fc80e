"""Credentials go only to the configured origin (issue 17, "HTTP storage sends credentials
to other hosts"), in every backend and model client.

Real: the http and krateo storage backends, the S3 backend (botocore), the KServe v2 REST
client (http.client), and stdlib HTTP servers on two loopback addresses, 127.0.0.1 (the
configured origin) and 127.0.0.2 ("another host"), recording every request they get.
Faked: Secrets, as files laid out the way the controller mounts them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from loopback_servers import Answer, Recorder, ok, serve_at

from contracts.model import ModelEndpoint
from contracts.storage import HttpStorage, KrateoStorage, S3Storage
from runners.api import ConfigError, InputRecord, RunContext
from runners.models.kserve import KServeV2Client
from runners.storage.http import HttpBackend
from runners.storage.krateo import KrateoBackend
from runners.storage.s3 import S3Backend

TOKEN = "tok-6f1d2c"
CUSTOM = {"X-Tenant-Secret": "tenant-9a8b"}


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    for name, key, value in [("api", "key", TOKEN), ("finops", "token", TOKEN)]:
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / key).write_text(value)
    return RunContext("uid-1", "job-1", {}, str(tmp_path))


@pytest.fixture
def elsewhere() -> Iterator[tuple[str, Recorder]]:
    """Another host: whatever it receives is a leak."""
    with serve_at("127.0.0.2", ok({"items": [{"v": "leaked"}]})) as served:
        yield served


def http_storage(url: str, *, header: str = "Authorization", **extra: Any) -> HttpStorage:
    return HttpStorage.model_validate(
        {
            "url": url,
            "headers": CUSTOM,
            "auth": {"secretRef": {"name": "api", "key": "key"}, "header": header},
            "recordsPath": "items",
            **extra,
        }
    )


def origin_of(url: str) -> str:
    return re.escape(url.rstrip("/"))


@pytest.mark.parametrize("where", ["Link header", "nextPath"])
def test_http_source_refuses_a_next_link_to_another_host(
    ctx: RunContext, elsewhere: tuple[str, Recorder], where: str
) -> None:
    other, leaked = elsewhere
    next_url = f"{other}/page2"

    def first_page(method: str, path: str, headers: Mapping[str, str]) -> Answer:
        if where == "Link header":
            return 200, {"Link": f'<{next_url}>; rel="next"'}, {"items": [{"v": 1}]}
        return 200, {}, {"items": [{"v": 1}], "next": next_url}

    with serve_at("127.0.0.1", first_page) as (url, _):
        pagination = {"mode": "link", **({"nextPath": "next"} if where == "nextPath" else {})}
        source = HttpBackend().open_source(http_storage(url, pagination=pagination), ctx)
        with pytest.raises(ConfigError) as refused:
            list(source.records(0))
        source.close()
    assert leaked.requests == []
    message = str(refused.value)
    assert re.search(
        rf"origin {origin_of(other)} is not the configured origin {origin_of(url)}", message
    )
    assert TOKEN not in message


@pytest.mark.parametrize("role", ["input", "output"])
def test_http_storage_refuses_a_redirect_to_another_host(
    ctx: RunContext, elsewhere: tuple[str, Recorder], role: str
) -> None:
    other, leaked = elsewhere
    moved = lambda method, path, headers: (307, {"Location": f"{other}/moved"}, None)  # noqa: E731
    with serve_at("127.0.0.1", moved) as (url, _):
        settings = http_storage(url, header="X-API-Key")
        with pytest.raises(ConfigError) as refused:
            if role == "input":
                source = HttpBackend().open_source(settings, ctx)
                list(source.records(0))
            else:
                HttpBackend().open_sink(settings, ctx, role="output").write_chunk(0, [])
    assert leaked.requests == []  # neither X-API-Key nor the custom header went there
    assert re.search(
        rf"redirected to {origin_of(other)}/moved: origin {origin_of(other)}", str(refused.value)
    )
    assert "set url to the new address" in str(refused.value)


def test_http_storage_follows_a_redirect_within_its_origin_with_credentials(
    ctx: RunContext,
) -> None:
    def answer(method: str, path: str, headers: Mapping[str, str]) -> Answer:
        if path == "/old":
            return 307, {"Location": "/new"}, None
        return 200, {}, {"items": [{"v": 1}]}

    with serve_at("127.0.0.1", answer) as (url, seen):
        source = HttpBackend().open_source(http_storage(f"{url}/old"), ctx)
        assert [r.data for r in source.records(0)] == [{"v": 1}]
        source.close()
    assert [(r.path, r.headers.get("Authorization")) for r in seen.requests] == [
        ("/old", f"Bearer {TOKEN}"),
        ("/new", f"Bearer {TOKEN}"),
    ]


@pytest.mark.parametrize("target", ["file:///etc/passwd", "gopher://127.0.0.1:6379/_INFO"])
def test_http_storage_refuses_a_redirect_to_another_scheme_naming_it(
    ctx: RunContext, target: str
) -> None:
    moved = lambda method, path, headers: (302, {"Location": target}, None)  # noqa: E731
    with serve_at("127.0.0.1", moved) as (url, _):
        source = HttpBackend().open_source(http_storage(url), ctx)
        with pytest.raises(
            ConfigError, match=rf"a {target.split(':')[0]}:// URL is not the configured origin"
        ):
            list(source.records(0))


def test_http_storage_refuses_a_next_link_with_credentials_in_it(ctx: RunContext) -> None:
    def pages(method: str, path: str, headers: Mapping[str, str]) -> Answer:
        if path == "/2":
            return 200, {}, {"items": [{"v": 2}]}
        host = headers["Host"]
        return 200, {}, {"items": [{"v": 1}], "next": f"http://eve:pw-4411@{host}/2"}

    with serve_at("127.0.0.1", pages) as (url, seen):
        settings = http_storage(url, pagination={"mode": "link", "nextPath": "next"})
        source = HttpBackend().open_source(settings, ctx)
        with pytest.raises(ConfigError, match=r"a URL with credentials \(user@\)") as refused:
            list(source.records(0))
    assert len(seen.requests) == 1 and "pw-4411" not in str(refused.value)


def test_krateo_refuses_a_redirect_to_another_host(
    ctx: RunContext, elsewhere: tuple[str, Recorder]
) -> None:
    other, leaked = elsewhere
    moved = lambda method, path, headers: (307, {"Location": f"{other}/steal"}, None)  # noqa: E731
    with serve_at("127.0.0.1", moved) as (url, _):
        (Path(ctx.secrets_dir) / "finops" / "server-url").write_text(url)
        settings = KrateoStorage.model_validate(
            {
                "api": {
                    "endpointRef": {"name": "finops"},
                    "path": "/compute/in",
                    "verb": "POST",
                    "headers": ["X-Tenant-Secret: tenant-9a8b"],
                }
            }
        )
        source = KrateoBackend().open_source(settings, ctx)
        with pytest.raises(ConfigError, match=rf"origin {origin_of(other)} is not the configured"):
            list(source.records(0))
        source.close()
    assert leaked.requests == []


def test_s3_does_not_follow_a_redirect_to_another_host(
    ctx: RunContext, elsewhere: tuple[str, Recorder], aws_credentials: None
) -> None:
    """botocore never follows a Location (its urllib3 calls pass redirect=False); its S3
    region redirector re-signs for the region S3 names and asks the configured endpoint
    again, once. So the 307 ends as an error answer, and nothing reaches the other host.
    Passes on the code before the fix too; it pins that behaviour."""
    other, leaked = elsewhere
    redirect = {"Location": f"{other}/bkt/in.jsonl", "x-amz-bucket-region": "eu-west-1"}
    moved = lambda method, path, headers: (307, redirect, None)  # noqa: E731
    with serve_at("127.0.0.1", moved) as (url, seen):
        settings = S3Storage.model_validate(
            {"bucket": "bkt", "key": "in.jsonl", "endpointUrl": url, "forcePathStyle": True}
        )
        source = S3Backend().open_source(settings, ctx)
        with pytest.raises(ConfigError):
            list(source.records(0))
        source.close()
    assert seen.requests and leaked.requests == []


def test_model_client_does_not_follow_a_redirect(
    ctx: RunContext, elsewhere: tuple[str, Recorder]
) -> None:
    """http.client follows no redirects: a 3xx is answered with where it points, and the
    API key never leaves the configured origin. Passes on the code before the fix too."""
    other, leaked = elsewhere
    moved = lambda method, path, headers: (307, {"Location": f"{other}/v2"}, None)  # noqa: E731
    with serve_at("127.0.0.1", moved) as (url, seen):
        endpoint = ModelEndpoint.model_validate(
            {
                "protocol": "kserve-v2",
                "url": url,
                "name": "m",
                "auth": {"secretRef": {"name": "api", "key": "key"}, "header": "X-API-Key"},
            }
        )
        client = KServeV2Client(endpoint, ctx)
        with pytest.raises(Exception, match=f"redirected to {re.escape(other)}/v2"):
            client.predict([InputRecord(0, "0", {"x": 1.0})])
        client.close()
    assert seen.requests and seen.requests[0].headers["X-API-Key"] == TOKEN
    assert leaked.requests == []
