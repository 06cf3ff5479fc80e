"""The shared HTTP layer: connections, auth, TLS and how failures are mapped.

Real: local HTTP and HTTPS servers (stdlib `http.server`, a certificate made by the `openssl`
CLI), sockets, timeouts, `http.client`. Faked: responses via `FakeTransport` where only the
mapping of a status matters, and Secrets as files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import socket
import threading
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from model_fakes import Certificate, FakeTransport, LocalServer, endpoint, json_answer, reply

from runners.api import BatchRejected, ConfigError, RunContext, TransientError
from runners.models.http import (
    REASON_LIMIT,
    ConnectionPool,
    HttpClient,
    HttpResponse,
    json_body,
    short_reason,
)
from runners.retry import retry_after

OK = {"ok": True}


def client_for(url: str, ctx: RunContext, **fields: Any) -> HttpClient:
    return HttpClient(endpoint("kserve-v1", url, **fields), ctx)


def test_retry_after_reads_seconds() -> None:
    assert retry_after("7") == 7.0
    assert retry_after(" 1.5 ") == 1.5


def test_retry_after_reads_http_date() -> None:
    now = 1_700_000_000.0
    assert retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30)


def test_retry_after_is_zero_for_past_dates_and_none_for_garbage() -> None:
    assert retry_after(formatdate(1_000, usegmt=True), now=2_000) == 0.0
    assert retry_after("soon") is None
    assert retry_after(None) is None
    assert retry_after("") is None


def test_short_reason_takes_error_message_from_json() -> None:
    assert short_reason(b'{"error": {"message": "bad   input\\n here"}}') == "bad input here"
    assert short_reason(b'{"detail": "Model iris not found"}') == "Model iris not found"


def test_short_reason_is_cut_to_the_limit() -> None:
    reason = short_reason(b"x" * 10_000)
    assert len(reason) == REASON_LIMIT
    assert reason.endswith("...")


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_maps_retryable_statuses_to_transient_error(status: int, ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply({"error": "busy"}, status=status))
    client = HttpClient(endpoint("kserve-v1"), ctx, transport=fake)
    with pytest.raises(TransientError, match=f"HTTP {status}: busy"):
        client.send("POST", "http://model:8080/x", body=b"{}", what="test")


def test_transient_error_carries_retry_after(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply(OK, status=429, headers={"Retry-After": "12"}))
    client = HttpClient(endpoint("kserve-v1"), ctx, transport=fake)
    with pytest.raises(TransientError) as caught:
        client.send("POST", "http://model:8080/x", body=b"{}", what="test")
    assert caught.value.retry_after == 12.0


@pytest.mark.parametrize("status", [400, 405, 413, 422])
def test_maps_other_client_errors_to_batch_rejected(status: int, ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply(b"<html>" + b"no " * 500, status=status))
    client = HttpClient(endpoint("kserve-v1"), ctx, transport=fake)
    with pytest.raises(BatchRejected) as caught:
        client.send("POST", "http://model:8080/x", body=b"{}", what="test")
    assert f"HTTP {status}" in str(caught.value)
    assert len(str(caught.value)) < REASON_LIMIT + 40


@pytest.mark.parametrize(
    ("status", "hint"),
    [(401, "model.auth"), (403, "model.auth"), (404, "model.url and model.name")],
)
def test_statuses_that_blame_the_endpoint_are_config_errors_with_a_hint(
    status: int, hint: str, ctx: RunContext
) -> None:
    fake = FakeTransport(lambda _: reply({"error": "nope"}, status=status))
    client = HttpClient(endpoint("kserve-v1"), ctx, transport=fake)
    with pytest.raises(ConfigError) as caught:
        client.send("POST", "http://model:8080/x", body=b"{}", what="test")
    assert f"HTTP {status}: nope" in str(caught.value)
    assert hint in str(caught.value)


def test_redirect_is_rejected_with_where_it_points(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: reply(b"", status=307, headers={"Location": "https://x/"}))
    client = HttpClient(endpoint("kserve-v1"), ctx, transport=fake)
    with pytest.raises(BatchRejected, match="redirected to https://x/"):
        client.send("POST", "http://model:8080/x", body=b"{}", what="test")


def test_non_json_success_is_transient(ctx: RunContext) -> None:
    page = reply(b"<html>gateway</html>", headers={"Content-Type": "text/html"})
    client = HttpClient(endpoint("kserve-v1"), ctx, transport=FakeTransport(lambda _: page))
    with pytest.raises(TransientError, match="not JSON \\(text/html\\)"):
        client.post_json("http://model:8080/x", b"{}", what="test")


def test_sends_bearer_token_from_secret(ctx: RunContext, put_secret: Callable[..., Path]) -> None:
    put_secret("model-key", "token", "s3cr3t\n")
    auth = {"secret_ref": {"name": "model-key", "key": "token"}}
    fake = FakeTransport(lambda _: reply(OK))
    HttpClient(endpoint("kserve-v1", auth=auth), ctx, transport=fake).send(
        "GET", "http://model:8080/", what="test"
    )
    assert fake.sent[0].headers["Authorization"] == "Bearer s3cr3t"


def test_sends_x_api_key_from_secret(ctx: RunContext, put_secret: Callable[..., Path]) -> None:
    put_secret("model-key", "key", "abc")
    auth = {"secret_ref": {"name": "model-key", "key": "key"}, "header": "X-API-Key"}
    fake = FakeTransport(lambda _: reply(OK))
    HttpClient(endpoint("kserve-v1", auth=auth), ctx, transport=fake).send(
        "GET", "http://model:8080/", what="test"
    )
    assert fake.sent[0].headers["X-API-Key"] == "abc"
    assert "Authorization" not in fake.sent[0].headers


def test_missing_auth_secret_is_a_config_error(ctx: RunContext) -> None:
    auth = {"secret_ref": {"name": "absent", "key": "token"}}
    with pytest.raises(ConfigError, match=r"model\.auth\.secretRef"):
        HttpClient(endpoint("kserve-v1", auth=auth), ctx, transport=FakeTransport(reply))


def test_error_reason_never_contains_the_key(
    ctx: RunContext, put_secret: Callable[..., Path]
) -> None:
    put_secret("model-key", "token", "s3cr3t")
    auth = {"secret_ref": {"name": "model-key", "key": "token"}}
    fake = FakeTransport(lambda _: reply({"error": "bad key"}, status=401))
    client = HttpClient(endpoint("kserve-v1", auth=auth), ctx, transport=fake)
    with pytest.raises(ConfigError) as caught:
        client.send("POST", "http://model:8080/x", body=b"{}", what="test")
    assert "s3cr3t" not in str(caught.value)


def test_reuses_one_connection_per_thread(
    ctx: RunContext, local_server: Callable[..., LocalServer]
) -> None:
    server = local_server(json_answer(OK))
    client = client_for(server.url, ctx)
    try:
        for _ in range(5):
            assert client.post_json(f"{server.url}/x", b"{}", what="test") == OK
    finally:
        client.close()
    assert server.connections == 1


def test_threads_use_their_own_connections(
    ctx: RunContext, local_server: Callable[..., LocalServer]
) -> None:
    server = local_server(json_answer(OK))
    client = client_for(server.url, ctx)
    results: list[Any] = []

    def work() -> None:
        results.extend(client.post_json(f"{server.url}/x", b"{}", what="t") for _ in range(20))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    client.close()
    assert results == [OK] * 80
    assert server.connections == 4


def test_resends_once_when_server_closed_the_idle_connection(
    ctx: RunContext, local_server: Callable[..., LocalServer]
) -> None:
    server = local_server(lambda *_: (200, {"Connection": "keep-alive"}, b"{}"))
    pool = ConnectionPool(timeout=5)
    try:
        pool.send("GET", f"{server.url}/a", body=None, headers={})
        conn = next(iter(pool._local.conns.values()))
        conn.sock.shutdown(socket.SHUT_RDWR)  # as if the server had timed the connection out
        response = pool.send("GET", f"{server.url}/b", body=None, headers={})
    finally:
        pool.close()
    assert response.status == 200
    assert [path for _, path, _, _ in server.requests] == ["/a", "/b"]


def test_connection_refused_is_transient(ctx: RunContext) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = client_for(f"http://127.0.0.1:{port}", ctx)
    with pytest.raises(TransientError, match="ConnectionRefusedError"):
        client.send("GET", f"http://127.0.0.1:{port}/", what="test")
    client.close()


def test_timeout_is_transient(ctx: RunContext) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = client_for(url, ctx, timeout_seconds=0.2)
        with pytest.raises(TransientError, match=r"no answer within 0\.2s"):
            client.send("POST", f"{url}/x", body=b"{}", what="test")
        client.close()


def test_plain_http_goes_through_the_environment_proxy(
    ctx: RunContext, local_server: Callable[..., LocalServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = local_server(json_answer(OK))
    monkeypatch.setenv("http_proxy", proxy.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    client = client_for("http://model.example:8080", ctx)
    try:
        client.send("POST", "http://model.example:8080/v1/x", body=b"{}", what="test")
    finally:
        client.close()
    assert proxy.requests[0][1] == "http://model.example:8080/v1/x"


def test_https_trusts_the_ca_from_the_secret(
    ctx: RunContext,
    local_server: Callable[..., LocalServer],
    certificate: Certificate,
    put_secret: Callable[..., Path],
) -> None:
    server = local_server(json_answer(OK), tls=certificate)
    put_secret("model-ca", "ca.crt", certificate.cert.read_bytes())
    url = f"https://localhost:{server.port}"
    tls = {"ca_secret_ref": {"name": "model-ca", "key": "ca.crt"}}
    client = client_for(url, ctx, tls=tls)
    try:
        assert client.post_json(f"{url}/x", b"{}", what="test") == OK
    finally:
        client.close()


def test_https_with_an_unknown_ca_is_a_config_error(
    ctx: RunContext, local_server: Callable[..., LocalServer], certificate: Certificate
) -> None:
    server = local_server(json_answer(OK), tls=certificate)
    url = f"https://localhost:{server.port}"
    client = client_for(url, ctx)
    try:
        with pytest.raises(ConfigError, match="caSecretRef"):
            client.post_json(f"{url}/x", b"{}", what="test")
    finally:
        client.close()


def test_https_can_skip_verification(
    ctx: RunContext, local_server: Callable[..., LocalServer], certificate: Certificate
) -> None:
    server = local_server(json_answer(OK), tls=certificate)
    url = f"https://127.0.0.1:{server.port}"
    client = client_for(url, ctx, tls={"insecure_skip_verify": True})
    try:
        assert client.post_json(f"{url}/x", b"{}", what="test") == OK
    finally:
        client.close()


def test_missing_ca_secret_is_a_config_error(ctx: RunContext) -> None:
    tls = {"ca_secret_ref": {"name": "absent", "key": "ca.crt"}}
    with pytest.raises(ConfigError, match=r"model\.tls\.caSecretRef"):
        client_for("https://model:8443", ctx, tls=tls)


def test_close_closes_the_transport(ctx: RunContext) -> None:
    fake = FakeTransport(lambda _: HttpResponse(200, {}, b"{}"))
    HttpClient(endpoint("kserve-v1"), ctx, transport=fake).close()
    assert fake.closed


@pytest.mark.parametrize(
    "doc",
    [
        {"instances": [[5.1, 3.5, 1.4, 0.2]] * 3, "s": "héllo \u2028", "n": None, "b": True},
        {"values": [1e-300, 1e300, -0.0], "nested": {"a": [], "k": {}}},
        {"big": 2**70},  # beyond orjson's 64 bits: the standard library's body
        {"lone": "\ud800"},  # a lone surrogate: likewise
        {1: "a key that is no string"},
        {"f": np.float64(0.5), "i": [1, 2]},  # a float subclass json writes
    ],
    ids=["rows", "floats", "big-int", "surrogate", "int-key", "float-subclass"],
)
def test_json_bodies_carry_the_values_json_dumps_writes(doc: dict[Any, Any]) -> None:
    body = json_body(doc)
    expected = json.dumps(doc, separators=(",", ":"))
    assert json.loads(body) == json.loads(expected)
    assert b", " not in body and b": " not in body  # compact


def test_json_bodies_write_non_finite_numbers_as_json_dumps_does_not_as_null() -> None:
    doc = {"x": [1.0, float("nan")], "y": float("inf"), "z": None}
    assert json_body(doc) == json.dumps(doc, separators=(",", ":")).encode()  # NaN, Infinity


@dataclasses.dataclass
class Record:
    a: int


@pytest.mark.parametrize("value", [object(), dt.datetime(2026, 1, 1), Record(1)])
def test_json_bodies_refuse_what_json_dumps_refuses(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        json_body({"v": value})
