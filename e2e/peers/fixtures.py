"""Session-scoped pytest fixtures that start the real model servers once per test session.

Why skip locally but fail in CI: a developer without a built llama.cpp wheel should still be able
to run the rest of the suite, but CI is set up to have every server, so a skip there would hide a
broken setup. Import the fixtures you need into a ``conftest.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import NoReturn

import pytest

from e2e.ci import is_ci
from e2e.peers.envs import EnvBuildError
from e2e.peers.server import PeerServer, PeerStartError, start


def skip_or_fail(reason: str) -> NoReturn:
    """Skip the test locally; fail it in CI, where every server is expected to work."""
    if is_ci():
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def start_or_skip(
    name: str, *, api_key: str | None = None, args: tuple[str, ...] = ()
) -> PeerServer:
    """``start(name)``, turning a build or start failure into ``skip_or_fail``."""
    try:
        return start(name, api_key=api_key, args=args)
    except (EnvBuildError, PeerStartError, OSError) as exc:
        skip_or_fail(f"real {name} server unavailable: {exc}")


def _serve(
    name: str, *, api_key: str | None = None, args: tuple[str, ...] = ()
) -> Iterator[PeerServer]:
    with start_or_skip(name, api_key=api_key, args=args) as server:
        yield server


@pytest.fixture(scope="session")
def kserve_server() -> Iterator[PeerServer]:
    """KServe Python model server: iris on v1 REST, v2 REST and v2 gRPC."""
    yield from _serve("kserve")


@pytest.fixture(scope="session")
def mlserver_server() -> Iterator[PeerServer]:
    """Seldon MLServer: iris on v2 REST and v2 gRPC."""
    yield from _serve("mlserver")


@pytest.fixture(scope="session")
def triton_server() -> Iterator[PeerServer]:
    """Triton via PyTriton: numpy iris classifier on v2 REST and gRPC."""
    yield from _serve("triton")


@pytest.fixture(scope="session")
def llama_chat_server() -> Iterator[PeerServer]:
    """llama.cpp OpenAI server: /v1/chat/completions and /v1/completions on a tiny model."""
    yield from _serve("llama-chat")


@pytest.fixture(scope="session")
def llama_embeddings_server() -> Iterator[PeerServer]:
    """llama.cpp OpenAI server with embeddings enabled: /v1/embeddings."""
    yield from _serve("llama-embeddings")


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[PeerServer]:
    """vLLM's OpenAI server (CPU): /v1/chat/completions and /v1/completions on a tiny model.

    It asks every request for ``server.api_key`` (``Authorization: Bearer <key>``), as a
    deployment with keys does. ~45-110 s to start and ~3 GB of memory: one per session, started
    by the first test that asks for it."""
    yield from _serve("vllm", api_key=secrets.token_urlsafe(16))


@pytest.fixture(scope="session")
def vllm_embeddings_server() -> Iterator[PeerServer]:
    """vLLM's pooling runner on the same model: /v1/embeddings (128 wide), asking for
    ``server.api_key``; as costly as ``vllm_server``."""
    yield from _serve("vllm-embeddings", api_key=secrets.token_urlsafe(16))


@pytest.fixture(scope="session")
def llama_server_4_slots() -> Iterator[PeerServer]:
    """llama.cpp's own ``llama-server`` with ``--parallel 4`` (4 slots), asking for
    ``server.api_key``; its env compiles llama.cpp (~9 min the first time)."""
    key = secrets.token_urlsafe(16)
    yield from _serve("llama-server", api_key=key, args=("--parallel", "4"))
