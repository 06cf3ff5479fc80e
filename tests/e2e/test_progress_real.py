"""Issue #18's bar on a real control plane: a 200,000-record run shows its progress live.

Real: kube-apiserver, etcd and kube-controller-manager (e2e/real, the session's plane,
CRDs installed; skipped with the `real control plane:` prefix where the binaries are
missing), `longrun controller` as a process (PROGRESS_INTERVAL=1s), the node agent
running the controller's Job pod as the real runner (`python -m runners`) and serving
its log to kube-apiserver over HTTPS (`pods/log` → the agent's kubelet endpoint, which
is how the controller reads the runner's progress lines), the real `kubectl` for every
read a user would make, JSONL files in and out.
Faked: the model, a KServe v1 stub on 127.0.0.1 (tests/local/conftest.py's ModelStub)
answering class 0 after 15 ms per request, so the run lasts long enough to be watched
(a real model server spends its time on the model, not on what is tested here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.fixtures import eventually, kube_real_session
from e2e.nodeagent import AgentConfig, Kube, NodeAgent
from e2e.nodeagent.logs import KubeletTLS
from e2e.real.handle import RealClusterHandle
from e2e.system import free_port
from tests.local.conftest import ModelStub
from tests.support import REPO_ROOT

__all__ = ["kube_real_session"]  # the session's real control plane, for this module
Obj = dict[str, Any]
RECORDS = 200_000
STUB_DELAY = 0.015  # seconds per request of 100 records: 2,000 requests, 2 at a time
FINISHED = ("Succeeded", "Failed")
POLL = 0.2  # between two looks, as a user with `watch kubectl get` would


@dataclass
class Watched:
    """What polling the run showed: each distinct progress while it ran, the tables."""

    progress: list[Obj] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    run: Obj = field(default_factory=dict)

    def see(self, run: Obj) -> None:
        self.run = run
        progress = (run.get("status") or {}).get("progress") or {}
        if run["status"].get("phase") != "Running" or "recordsWritten" not in progress:
            return
        if not self.progress or _counts(self.progress[-1]) != _counts(progress):
            self.progress.append(progress)


@dataclass
class RealSystem:
    """The control plane, a namespace, a node agent serving it, the controller process."""

    handle: RealClusterHandle
    ns: str
    agent: NodeAgent
    controller: subprocess.Popen[bytes]
    log: Path

    def kubectl(self, *args: str, input: str | None = None) -> str:
        done = self.handle.kubectl(*args, "-n", self.ns, input=input, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def controller_log(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture
def real_system(kube_real_session: RealClusterHandle, tmp_path: Path) -> Iterator[RealSystem]:
    handle = kube_real_session
    handle.require_controllers()
    ns = handle.namespace("progress")
    agent = _start_agent(handle, ns, tmp_path)
    log = tmp_path / "controller.log"
    controller = _start_controller(handle, ns, log)
    system = RealSystem(handle, ns, agent, controller, log)
    try:
        yield system
    finally:
        controller.send_signal(signal.SIGTERM)
        code = controller.wait(timeout=30)
        agent.stop()
        core: Any = client.CoreV1Api(handle.api_client())
        core.delete_node(agent.config.node_name, _preload_content=False)
        assert code == 0, f"controller exited {code}:\n{system.controller_log()}"


def _start_agent(handle: RealClusterHandle, ns: str, tmp_path: Path) -> NodeAgent:
    """A node agent for this namespace whose log server kube-apiserver trusts and reaches."""
    node = f"node-{ns}"
    serving = handle.plane.issue_kubelet_certificate(node, hostname=socket.gethostname())
    config = AgentConfig(
        workdir=tmp_path / "agent",
        node_name=node,
        namespaces=(ns,),
        kubelet_tls=KubeletTLS(serving.cert, serving.key, handle.plane.ca_cert_path),
        renew_seconds=2.0,
    )
    return NodeAgent(config, Kube(handle.api_client())).start()


def _start_controller(handle: RealClusterHandle, ns: str, log: Path) -> subprocess.Popen[bytes]:
    health = free_port()
    env = {
        **os.environ,
        "PROGRESS_INTERVAL": "1s",
        "POLLING_INTERVAL": "10s",
        "MAX_RECONCILE_RATE": "2",
        "WATCH_NAMESPACES": ns,
        "LEADER_ELECTION": "false",
        "LOG_FORMAT": "json",
    }
    argv = [sys.executable, "-m", "controller", "controller"]
    argv += ["--kubeconfig", str(handle.kubeconfig_path), "--health-port", str(health)]
    argv += ["--metrics-port", str(free_port())]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=out, cwd=REPO_ROOT)

    def ready() -> bool:
        assert process.poll() is None, log.read_text()
        return _status(f"http://127.0.0.1:{health}/readyz") == 200

    eventually(ready, timeout=60, interval=0.2)
    return process


def _status(url: str) -> int:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return int(answer.status)
    except OSError:
        return 0


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    model = ModelStub()
    model.delay = STUB_DELAY
    yield model
    model.close()


def test_a_200k_record_run_shows_live_progress_in_its_status_and_columns(
    real_system: RealSystem, stub: ModelStub, tmp_path: Path
) -> None:
    started = time.monotonic()
    _write_input(tmp_path / "in.jsonl")
    real_system.kubectl("apply", "-f", "-", input=_manifests(tmp_path, stub.url))

    watched = _watch(real_system, "big")

    wall = time.monotonic() - started
    status = watched.run["status"]
    print(f"\n200k run: {status['phase']} in {wall:.1f}s wall; progress seen:")
    for progress in watched.progress:
        print(
            f"  {progress.get('text')}  {progress.get('rateText')}  eta {progress.get('etaText')}"
        )
    assert status["phase"] == "Succeeded", real_system.controller_log()
    assert len(watched.progress) >= 3, watched.progress
    for key in ("recordsRead", "recordsWritten"):
        values = [p.get(key, 0) for p in watched.progress]
        assert values == sorted(values), (key, values)
    assert status["result"]["recordsWritten"] == RECORDS
    assert status["result"]["recordsFailed"] == 0
    assert status["progress"]["recordsWritten"] == RECORDS
    assert sorted(_output_ids(tmp_path / "out")) == list(range(RECORDS))  # each exactly once
    assert stub.instances >= RECORDS
    row = _columns(watched.tables)
    print(f"  table while running: {row}")
    assert row["PHASE"] == "Running"
    assert row["PROGRESS"].endswith("%)") and "/200k (" in row["PROGRESS"], row
    assert row["RATE"].endswith("/s") and row["ETA"] != "<none>", row


def _watch(system: RealSystem, name: str, *, timeout: float = 600.0) -> Watched:
    """Poll the run as a user would until it finishes: `-o json` for the status, and the
    table (`kubectl get irun NAME`) each time the status shows a progress."""
    watched = Watched()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        watched.see(json.loads(system.kubectl("get", "irun", name, "-o", "json")))
        phase = watched.run["status"].get("phase")
        if phase in FINISHED:
            return watched
        if watched.progress and phase == "Running":
            watched.tables.append(system.kubectl("get", "irun", name))
        time.sleep(POLL)
    raise AssertionError(f"run {name} not finished in {timeout}s:\n{system.controller_log()}")


def _columns(tables: list[str]) -> dict[str, str]:
    """The columns of the last table that showed the run Running with its progress."""
    for table in reversed(tables):
        row = _table_row(table)
        if row.get("PHASE") == "Running" and row.get("PROGRESS", "<none>") != "<none>":
            return row
    raise AssertionError(f"no table showed the progress of the running run: {tables[:3]}")


def _table_row(table: str) -> dict[str, str]:
    """kubectl's table, cut at the columns' header positions (headers and values such as
    `LAST RUN` or `12k/200k (6%)` hold single spaces; columns are two apart at least)."""
    header, row = table.splitlines()[:2]
    starts = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", header)]
    ends = [start for start, _ in starts[1:]] + [len(row)]
    return {name: row[start:end].strip() for (start, name), end in zip(starts, ends, strict=True)}


def _counts(progress: Obj) -> tuple[int, int, int]:
    read, written, failed = (
        progress.get(k) or 0 for k in ("recordsRead", "recordsWritten", "recordsFailed")
    )
    return int(read), int(written), int(failed)


def _write_input(path: Path) -> None:
    with path.open("w") as handle:
        for i in range(RECORDS):
            handle.write(json.dumps({"id": i, "x": [i % 7 * 0.5, 1.0]}) + "\n")


def _manifests(tmp_path: Path, model_url: str) -> str:
    config = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": "big"},
        "spec": {
            "model": {
                "protocol": "kserve-v1",
                "url": model_url,
                "name": "iris",
                "inputFields": ["x"],
            },
            "storage": {
                "input": {"file": {"path": str(tmp_path / "in.jsonl"), "idField": "id"}},
                "output": {"file": {"path": str(tmp_path / "out")}},
            },
            "runner": {
                "batchSize": 100,
                "concurrency": 2,
                "chunkSize": 5000,
                "progressIntervalSeconds": 1,
            },
        },
    }
    run = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": "big"},
        "spec": {"configRef": {"name": "big"}, "timeoutSeconds": 900},
    }
    return "---\n".join(yaml.safe_dump(doc) for doc in (config, run))


def _output_ids(out: Path) -> list[int]:
    return [
        int(json.loads(line)["id"])
        for part in sorted(out.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
