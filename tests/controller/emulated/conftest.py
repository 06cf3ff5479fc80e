"""Fixtures for controller integration tests, on the backend LONGRUN_KUBE_BACKEND names.

Real: the backend — the API emulator (API server semantics, Job/CronJob/GC controllers)
by default, or a private kube-apiserver, etcd and kube-controller-manager (e2e/real) —
the official Python client, the controller's informers, queue, leader election and
reconciler, and the node agent (e2e/nodeagent) that binds the namespace's pods and runs
each container as a process. Faked: what that process does (exit code, termination
message, output, how long it runs), scripted by the test (e2e/nodeagent/scripted.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.backends import KubeHandle, selected_backend
from e2e.fixtures import kube_emulator, kube_real_session  # noqa: F401
from tests.controller.emulated.harness import Env


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    """A fresh namespace on the selected backend (a fresh emulator on the default one), the
    CRDs, a node agent running its pods as scripted containers, and a way to start
    controllers."""
    if selected_backend() == "real":
        handle: KubeHandle = request.getfixturevalue("kube_real_session")
        handle.require_controllers()
    else:
        handle = request.getfixturevalue("kube_emulator")
    environment = Env.create(handle, workdir=tmp_path)
    try:
        yield environment
    finally:
        environment.close()
