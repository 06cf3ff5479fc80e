"""Fixtures of the Batch API tests: the server in this process over an in-memory cluster.

Real: the HTTP server (batchapi/server.py) on a free port, the directory file store in the
test's directory, the official `openai` client. Faked: the cluster (tests/batchapi/fakes.py),
which stands in for the Kubernetes API server (runs, reviews) and, in `finish_run`, for the
controller and the runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import openai
import pytest

from batchapi.access import Gate
from batchapi.batches import Batches
from batchapi.files import Files
from batchapi.server import BatchApi, BatchApiServer
from batchapi.settings import ApiSettings
from batchapi.store import DirectoryStore
from tests.batchapi.fakes import FakeCluster

MODEL = "tiny-llama"


@dataclass
class Served:
    """A running server, its fake cluster and file store."""

    server: BatchApiServer
    cluster: FakeCluster
    store: DirectoryStore
    root: Path
    clients: list[openai.OpenAI] = field(default_factory=list)

    def client(
        self, token: str, namespace: str | None = "team-a", **options: object
    ) -> openai.OpenAI:
        """The official client, only base_url and key set (no retries: answers are checked)."""
        url = self.server.url
        base = f"{url}/namespaces/{namespace}/v1" if namespace else f"{url}/v1"
        client = openai.OpenAI(base_url=base, api_key=token, max_retries=0, timeout=30, **options)  # type: ignore[arg-type]
        self.clients.append(client)
        return client


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """`serve(**settings)`: a server with users alice (team-a) and bob (team-b), and a
    template serving MODEL in each namespace."""
    started: list[Served] = []

    def start(**overrides: object) -> Served:
        settings = ApiSettings(**{"max_file_bytes": 1_000_000, **overrides})  # type: ignore[arg-type]
        cluster = FakeCluster()
        cluster.add_user("alice-token", "alice", "team-a")
        cluster.add_user("bob-token", "bob", "team-b")
        for namespace in ("team-a", "team-b"):
            cluster.add_template(namespace, "llm", MODEL)
        root = tmp_path / f"files-{len(started)}"
        store = DirectoryStore(root)
        files = Files(store, settings)
        api = BatchApi(
            files=files,
            batches=Batches(cluster, files),
            gate=Gate(cluster, settings),
            drain_limit=settings.max_file_bytes * 4,
        )
        served = Served(BatchApiServer(api).start(), cluster, store, root)
        started.append(served)
        return served

    yield start
    for served in started:
        for client in served.clients:
            client.close()
        served.server.stop()


@pytest.fixture
def served(serve: Callable[..., Served]) -> Served:
    """A server with the default settings (1 MB upload limit)."""
    return serve()
