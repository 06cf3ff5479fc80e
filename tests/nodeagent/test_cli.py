"""`python -m e2e.nodeagent` as people (and harnesses) start it: a process beside the API.

Real: the agent as its own process with only a kubeconfig, on both backends; the pods
it runs; SIGTERM ending it cleanly. Faked: nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client

from e2e.fixtures import eventually
from tests.nodeagent.conftest import Cluster, backend_handle, python_pod, terminated
from tests.support import REPO_ROOT


def test_the_command_runs_pods_until_sigterm(kube: Cluster, tmp_path: Path) -> None:
    options = ["--namespace", kube.ns, "--scheduler-name", kube.node_name]
    with agent_process(kube.handle.kubeconfig_path, kube.node_name, tmp_path, options) as agent:
        kube.create_pod("via-cli", "print('ok')")
        pod = kube.wait_phase("via-cli", "Succeeded", "Failed")
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=15)

    assert terminated(pod)["exitCode"] == 0
    assert code == 0
    assert (tmp_path / "ready").read_text().strip() == kube.node_name
    assert "node agent ready" in (tmp_path / "agent.log").read_text()


def test_without_namespaces_the_command_serves_them_all(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # Emulator only: on the shared real control plane it would take other tests' pods.
    handle = backend_handle(request, "emulator")
    core = client.CoreV1Api(handle.api_client())
    namespaces = [handle.namespace("one"), handle.namespace("two")]

    with agent_process(handle.kubeconfig_path, "every-ns", tmp_path, []):
        for ns in namespaces:
            core.create_namespaced_pod(ns, python_pod("p", "pass"))

        eventually(
            lambda: (
                [core.read_namespaced_pod("p", ns).status.phase for ns in namespaces]
                == ["Succeeded", "Succeeded"]
            ),
            timeout=30,
        )


@contextmanager
def agent_process(
    kubeconfig: Path, node: str, tmp_path: Path, options: list[str]
) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m e2e.nodeagent` running (ready) inside the block, stopped after it."""
    ready = tmp_path / "ready"
    argv = [
        sys.executable, "-m", "e2e.nodeagent",
        "--kubeconfig", str(kubeconfig),
        "--node-name", node,
        "--workdir", str(tmp_path / "agent"),
        "--ready-file", str(ready),
        *options,
    ]  # fmt: skip
    with (tmp_path / "agent.log").open("w") as log:
        agent = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            eventually(lambda: ready.exists() or agent.poll() is not None, timeout=30)
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()
            yield agent
        finally:
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
                try:
                    agent.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    agent.kill()
                    agent.wait()
