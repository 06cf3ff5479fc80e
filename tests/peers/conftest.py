"""Fixtures for the real-server tests: the session-scoped servers from ``e2e.peers.fixtures``.

Nothing is faked here; each fixture starts (once per session) a real server from its cached env.
"""

from e2e.peers.fixtures import (
    kserve_server,
    llama_chat_server,
    llama_embeddings_server,
    mlserver_server,
    triton_server,
)

__all__ = [
    "kserve_server",
    "llama_chat_server",
    "llama_embeddings_server",
    "mlserver_server",
    "triton_server",
]
