"""`concurrency: auto` end to end: `longrun run` against a real vLLM, the runner against Triton.

Real: the `longrun` command as a subprocess, as a user runs it (rendering, the contract, the
runner it starts, the Secret it mounts); `python -m runners` on a contract; vLLM's OpenAI server
(the CPU build, with an API key) and Triton via PyTriton, from e2e/peers; local files. Faked:
only the models (a tiny random llama; a nearest-centroid iris classifier). What the gate
settles on depends on the machine's load, so the tests check what must hold whatever it
settles on: every record answered once, correctly where the answer is known, within the
configured maximum, and the runner saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from e2e.peers.server import PeerServer
from tests.iris import class_of
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]

BIN = Path(sys.executable).parent


def chat_run(server: PeerServer, data: Path) -> list[dict[str, object]]:
    """A Secret with the server's key, a config with concurrency auto, a one-shot run."""
    assert server.api_key is not None
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "llm-key"},
        "stringData": {"key": server.api_key},
    }
    config = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": "auto-chat"},
        "spec": {
            "model": {
                "protocol": "openai-chat",
                "url": f"{server.http_url}/v1",
                "name": server.model,
                "maxTokens": 4,
                "auth": {"secretRef": {"name": "llm-key", "key": "key"}},
            },
            "storage": {
                "input": {"file": {"path": str(data / "prompts.jsonl"), "idField": "id"}},
                "output": {"file": {"path": str(data / "answers"), "format": "jsonl"}},
            },
            "runner": {"concurrency": "auto", "maxConcurrency": 6, "batchSize": 2},
        },
    }
    run = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": "auto-chat-once"},
        "spec": {"configRef": {"name": "auto-chat"}},
    }
    return [secret, config, run]


def test_longrun_run_with_concurrency_auto_answers_every_prompt_on_vllm(
    tmp_path: Path, vllm_server: PeerServer
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    prompts = [{"id": f"q{i}", "prompt": f"Count to {i}."} for i in range(120)]
    (data / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts))
    manifest = tmp_path / "auto.yaml"
    manifest.write_text(yaml.safe_dump_all(chat_run(vllm_server, data)))

    done = subprocess.run(
        [str(BIN / "longrun"), "run", "-f", str(manifest), "--work-dir", str(tmp_path / "w")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )

    assert done.returncode == 0, done.stderr[-4000:]
    assert "records: read=120 written=120 failed=0" in done.stderr, done.stderr[-4000:]
    assert "concurrency auto: starting at 4 requests in flight, at most 6" in done.stderr
    answers = [
        json.loads(line)
        for part in sorted((data / "answers").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert sorted(a["id"] for a in answers) == sorted(p["id"] for p in prompts)
    assert all(isinstance(a["prediction"], str) for a in answers), answers[0]
    assert vllm_server.api_key not in done.stderr  # the key went by reference


def test_the_runner_with_concurrency_auto_classifies_every_row_on_triton(
    tmp_path: Path, triton_server: PeerServer
) -> None:
    rows = [[5.1, 3.5, 1.4, 0.2], [5.9, 3.0, 4.2, 1.5], [6.7, 3.0, 5.2, 2.3]] * 20_000
    source = tmp_path / "iris.jsonl"
    source.write_text(
        "".join(
            json.dumps({"id": i, **dict(zip("abcd", row, strict=True))}) + "\n"
            for i, row in enumerate(rows)
        )
    )
    contract = {
        "contractVersion": "v1",
        "jobId": "auto",
        "jobName": "auto",
        "run": {"name": "a", "namespace": "a", "uid": "auto", "generation": 1, "scheduled": False},
        "config": {"name": "a", "namespace": "a", "generation": 1},
        "model": {
            "protocol": "kserve-v2",
            "url": triton_server.http_url,
            "name": triton_server.model,
        },
        "input": {"file": {"path": str(source), "idField": "id"}},
        "output": {"file": {"path": str(tmp_path / "out"), "format": "jsonl"}},
        "runner": {"concurrency": "auto", "maxConcurrency": 12, "batchSize": 64},
    }
    (tmp_path / "contract.json").write_text(json.dumps(contract))
    env = {
        **os.environ,
        "CONTRACT_PATH": str(tmp_path / "contract.json"),
        "TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
    }

    done = subprocess.run(
        [sys.executable, "-m", "runners"], env=env, capture_output=True, text=True, timeout=600
    )

    assert done.returncode == 0, done.stderr[-4000:]
    assert "concurrency auto: starting at 4 requests in flight, at most 12" in done.stderr
    summary = json.loads((tmp_path / "termination-log").read_text())
    assert (summary["recordsWritten"], summary["recordsFailed"]) == (len(rows), 0)
    out = [
        json.loads(line)
        for part in sorted((tmp_path / "out").glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    assert len(out) == len(rows)
    wrong = [o for o in out if class_of(o["prediction"]) != int(o["id"]) % 3]
    assert not wrong, wrong[:3]
