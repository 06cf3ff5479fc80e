"""The Batch API driven from Node by OpenAI's own npm client, on the whole system.

Real: the npm `openai` package (pinned, tests/e2e/batch_api.py, installed once under
~/.cache/longrun/npm), node, and everything of tests/e2e/test_batch_api.py: a Kubernetes
backend, `longrun controller` and `longrun batch-api` as processes, the node agent running the
runner, llama.cpp answering. Faked: nothing. Skips (fails in CI) without node and npm.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.peers.server import PeerServer
from e2e.system import System
from tests.e2e.batch_api import (
    BatchApiProcess,
    node_openai,
    requests_file,
    serve_batch_api,
    tenant,
)

pytestmark = pytest.mark.requires_service


@pytest.fixture
def batch_api(system: System, tmp_path: Path) -> Iterator[BatchApiProcess]:
    yield from serve_batch_api(system, tmp_path)


FLOW = Path(__file__).with_name("openai_flow.cjs")


def test_the_node_client_uploads_creates_polls_downloads_lists_and_cancels(
    system: System, batch_api: BatchApiProcess, llama_chat_server: PeerServer, tmp_path: Path
) -> None:
    modules = node_openai()
    ns, key = tenant(system, "batch-node", llama_chat_server)
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(requests_file(12))
    done = subprocess.run(
        ["node", str(FLOW), f"{batch_api.url}/namespaces/{ns}/v1", key, str(requests)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NODE_PATH": str(modules)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["status"] == "completed" and seen["metadata"] == {"from": "node"}
    assert seen["counts"] == {"total": 12, "completed": 12, "failed": 0}
    assert sorted(seen["customIds"]) == sorted(f"req-{i}" for i in range(12))
    assert (seen["cancelling"], seen["cancelled"]) == ("cancelling", "cancelled")
    assert sorted(seen["listed"]) == sorted([seen["batchId"], seen["secondId"]])
    assert seen["fileId"] in seen["files"] and seen["missing"] == 404
