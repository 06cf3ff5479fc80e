"""`longrun batch-api --local`: batches run by `longrun run` on this machine, state in a directory.

Real: `longrun batch-api --local` as a process, its detached batch jobs (`longrun run` and the
runner), the llama.cpp server (e2e/peers) answering, the official `openai` client with the key
the server wrote. Faked: nothing. The server is SIGKILLed mid-batch: the batch's job goes on
without it and a new server finds it; a cancel stops the job and keeps what it committed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml

from e2e.peers.server import PeerServer
from e2e.system import ROOT
from tests.e2e.batch_api import ENDPOINT, requests_file, wait_status

pytestmark = pytest.mark.requires_service


class LocalServer:
    """`longrun batch-api --local` on a fixed port and work directory."""

    def __init__(self, work: Path, templates: Path) -> None:
        self.work, self.templates = work, templates
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0

    def start(self) -> LocalServer:
        argv = [
            sys.executable,
            "-m",
            "controller",
            "batch-api",
            "--local",
            "-f",
            str(self.templates),
            "--work-dir",
            str(self.work),
            "--port",
            str(self.port),
            "--log-format",
            "text",
        ]
        log = (self.work / "server.log").open("ab")
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=ROOT)
        log.close()
        assert self.process.stdout is not None
        first = json.loads(self.process.stdout.readline())
        self.url = first["url"]
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])
        self.key = Path(first["apiKeyFile"]).read_text().strip()
        return self

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=self.key, max_retries=0, timeout=60)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture
def local_server(tmp_path: Path, llama_chat_server: PeerServer) -> Iterator[LocalServer]:
    (tmp_path / "work").mkdir()
    template = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": "llm", "annotations": {"longrun.dev/openai-model": "tiny-llama"}},
        "spec": {
            "model": {
                "protocol": "openai-chat",
                "url": f"{llama_chat_server.http_url}/v1",
                "name": "tiny-llama",
            },
            "storage": {
                "input": {"file": {"path": "/unused.jsonl"}},
                "output": {"file": {"path": "/unused"}},
            },
            "runner": {
                "concurrency": 1,
                "chunkSize": 10,
                "requestsPerSecond": 20,
                "progressIntervalSeconds": 1,
            },
        },
    }
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(template))
    server = LocalServer(tmp_path / "work", tmp_path / "models.yaml").start()
    yield server
    server.stop()
    for job in (tmp_path / "work" / "batch-api").rglob("job.json"):  # leave no job behind
        pid = json.loads(job.read_text())["pid"]
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def test_a_local_batch_outlives_a_killed_server_and_completes(local_server: LocalServer) -> None:
    with local_server.client() as client:
        uploaded = client.files.create(file=("r.jsonl", requests_file(150)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        wait_status(client, batch.id, "in_progress")
    local_server.stop(signal.SIGKILL)
    time.sleep(1)
    local_server.start()  # the same port, work directory and key
    with local_server.client() as client:
        assert client.batches.retrieve(batch.id).status == "in_progress"  # its job went on
        done = wait_status(client, batch.id, "completed")
        assert done.request_counts.completed == 150
        lines = client.files.content(done.output_file_id).read().splitlines()
        assert sorted(json.loads(x)["custom_id"] for x in lines) == sorted(
            f"req-{i}" for i in range(150)
        )


def test_a_cancelled_local_batch_keeps_what_it_finished(local_server: LocalServer) -> None:
    with local_server.client() as client:
        uploaded = client.files.create(file=("r.jsonl", requests_file(1000)), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        deadline = time.monotonic() + 120
        while (client.batches.retrieve(batch.id).request_counts.completed or 0) < 20:
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.5)
        assert client.batches.cancel(batch.id).status == "cancelling"
        cancelled = wait_status(client, batch.id, "cancelled")
        completed = cancelled.request_counts.completed
        assert 20 <= completed < 1000
        lines = client.files.content(cancelled.output_file_id).read().splitlines()
        assert len(lines) == completed
