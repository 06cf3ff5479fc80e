"""The admin protocols and the host client, against servers on real addresses.

Real: the protocols and `HostClient` through the real address guard, speaking HTTP to
processes in network namespaces (e2e/netns.py): a real llama.cpp server for `openai`
(llama-cpp-python, e2e/peers); for `ollama` and `inferenced` stand-ins written from the
daemons' public API documents (tests/controller/hosts/standins.py: no real Ollama or
inferenced runs here, docs/serving.md says so); and a server that misbehaves on purpose
for the client's rules. Faked: nothing else. Skips with one line where namespaces cannot
be made (not root) or the llama env is missing; fails instead in CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.hosts.client import HostClient, HostError
from controller.hosts.guard import HostGuard
from controller.hosts.protocols import installed
from e2e import netns
from tests.controller.hosts.spaces import require_namespaces, stand_in

pytestmark = pytest.mark.requires_service  # network namespaces (root), stand-ins
GUARD = HostGuard(denied=("169.254.0.0/16",))
PROTOCOLS = installed()


def client(endpoint: str, token: str | None = None) -> HostClient:
    return HostClient(endpoint, guard=GUARD, timeout=10, token=token)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real llama.cpp server serving `tiny-chat`, in a network namespace."""
    from e2e.peers.fixtures import skip_or_fail
    from e2e.peers.server import PeerStartError, start

    require_namespaces()
    with netns.NetworkHost(7) as space:
        try:
            server = start(
                "llama-chat", ports={"http": 8080}, host=space.address, prefix=space.prefix,
                model_name="tiny-chat",
            )  # fmt: skip
        except (PeerStartError, OSError) as exc:
            skip_or_fail(f"real llama-chat server unavailable: {exc}")
        try:
            yield server.http_url
        finally:
            server.stop()


def test_openai_lists_what_a_real_llamacpp_server_serves_and_cannot_load(llama: str) -> None:
    protocol = PROTOCOLS["openai"]
    host = client(llama)
    protocol.health(host)
    assert protocol.list(host) == ["tiny-chat"]
    assert host.address == llama.split("//")[1].split(":")[0]
    with pytest.raises(HostError, match="cannot load"):
        protocol.load(host, "other", source=None)


def test_ollama_pulls_loads_and_unloads_through_the_documented_api(tmp_path: Path) -> None:
    protocol = PROTOCOLS["ollama"]
    with stand_in(1, "ollama", library=["qwen2.5:3b", "llama3"], workdir=tmp_path) as ollama:
        host = client(ollama.endpoint)
        protocol.health(host)
        assert protocol.list(host) == []
        protocol.load(host, "llama3", source=None)
        assert protocol.list(host) == ["llama3:latest"]
        assert protocol.normalize("llama3") == protocol.normalize("llama3:latest")
        protocol.load(host, "llama3", source=None)  # pulled already: no second pull
        protocol.unload(host, "llama3")
        assert protocol.list(host) == []
        asked = [(r["method"], r["path"]) for r in ollama.requests()]
    assert asked.count(("POST", "/api/pull")) == 1
    assert asked.count(("POST", "/api/generate")) == 3  # load, load, unload


def test_ollama_pulls_a_models_hugging_face_source_and_names_it_after_the_model(
    tmp_path: Path,
) -> None:
    protocol = PROTOCOLS["ollama"]
    library = ["hf.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF"]
    with stand_in(2, "ollama", library=library, workdir=tmp_path) as ollama:
        host = client(ollama.endpoint)
        source = "hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf"
        protocol.load(host, "qwen-small", source=source)
        assert protocol.list(host) == ["qwen-small:latest"]
        with pytest.raises(HostError, match="hf:// sources only"):
            protocol.load(host, "other", source="s3://bucket/model.gguf")


def test_ollama_says_why_a_pull_failed_in_its_own_words(tmp_path: Path) -> None:
    protocol = PROTOCOLS["ollama"]
    with (
        stand_in(3, "ollama", library=[], workdir=tmp_path) as ollama,
        pytest.raises(HostError) as failed,
    ):
        protocol.load(client(ollama.endpoint), "nope", source=None)
    assert str(failed.value) == (
        "POST /api/pull answered HTTP 500: pull model manifest: file does not exist"
    )


def test_inferenced_loads_with_post_admin_models_and_sends_its_token(tmp_path: Path) -> None:
    protocol = PROTOCOLS["inferenced"]
    name = "mlx-community/Qwen2.5-3B-Instruct-4bit"
    with stand_in(4, "inferenced", library=[name], workdir=tmp_path, token="s3cret") as daemon:
        with pytest.raises(HostError, match="HTTP 401"):
            protocol.load(client(daemon.endpoint), name, source=None)
        host = client(daemon.endpoint, token="s3cret")
        protocol.load(host, name, source=None)
        assert protocol.list(host) == [name]
        protocol.unload(host, name)
        assert protocol.list(host) == []
        admin = [r for r in daemon.requests() if r["path"].startswith("/admin/")]
    assert [(r["method"], r["token"]) for r in admin] == [
        ("POST", False), ("POST", True), ("DELETE", True),
    ]  # fmt: skip


def test_the_client_follows_no_redirect_and_repeats_no_page_of_the_answer(tmp_path: Path) -> None:
    with stand_in(5, "odd", library=[], workdir=tmp_path) as odd:
        host = client(odd.endpoint)
        with pytest.raises(HostError) as redirected:
            host.request("GET", "/redirect")
        with pytest.raises(HostError) as big:
            host.request("GET", "/big")
        with pytest.raises(HostError) as html:
            host.request("GET", "/html")
        with pytest.raises(HostError) as failed:
            host.request("GET", "/error")
    assert "redirect (HTTP 302), which is not followed" in str(redirected.value)
    assert "larger than 1 MiB" in str(big.value)
    assert str(html.value) == "GET /html answered HTTP 200 with something that is not JSON"
    assert str(failed.value) == "GET /error answered HTTP 500: model x: out of memory"
    for error in (redirected, big, html, failed):
        assert "SECRET-PAGE" not in str(error.value) and "169.254" not in str(error.value)
