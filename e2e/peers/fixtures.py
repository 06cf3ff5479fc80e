"""Session-scoped pytest fixtures that start the real model servers once per test session.

Why skip locally but fail in CI: a developer without a built llama.cpp wheel should still be able
to run the rest of the suite, but CI is set up to have every server, so a skip there would hide a
broken setup. Import the fixtures you need into a ``conftest.py``.
"""

from __future__ import annotations

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


def start_or_skip(name: str) -> PeerServer:
    """``start(name)``, turning a build or start failure into ``skip_or_fail``."""
    try:
        return start(name)
    except (EnvBuildError, PeerStartError, OSError) as exc:
        skip_or_fail(f"real {name} server unavailable: {exc}")


def _serve(name: str) -> Iterator[PeerServer]:
    with start_or_skip(name) as server:
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
