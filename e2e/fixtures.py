"""pytest fixtures for the Kubernetes API emulator.

`kube_emulator` gives each test a fresh emulator (function scope); tests that
only need isolation by namespace can share `kube_emulator_session`. Both yield
an EmulatorHandle: the URL and kubeconfig for clients, the clock, fault
injection, `api_client()` for the official Python client, `kubectl(...)` for the
real binary, and `restart()`. A node agent (e2e/nodeagent) runs every emulator's
pods as scripted containers (`executor`: e2e/nodeagent/scripted.py), on the
emulator's clock; `kube_emulator_factory(agent=False)` starts an emulator without.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from kubernetes.client.exceptions import ApiException

from e2e.backends import (
    BACKENDS,
    REAL_STATUS,
    HandleBase,
    KubeHandle,
    install_crds,
    selected_backend,
    skip_real,
)
from e2e.ci import is_ci
from e2e.emulator import Clock, Emulator, EmulatorConfig
from e2e.nodeagent import AgentConfig, Kube, NodeAgent, ScriptedPods
from e2e.nodeagent.config import default_capacity
from e2e.nodeagent.logs import KubeletTLS
from e2e.real import AssetsNotFound, ControlPlane, StartupError, find_assets
from e2e.real.handle import RealClusterHandle

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "EmulatorHandle",
    "eventually",
    "kube_backend",
    "kube_each_backend",
    "kube_emulator",
    "kube_emulator_backend_session",
    "kube_emulator_factory",
    "kube_emulator_session",
    "kube_real_session",
    "require_kubectl",
    "scripted_pods_for",
    "start_scripted_agent",
]

T = TypeVar("T")
KUBECTL = os.environ.get("KUBECTL", "/usr/bin/kubectl")
# Small on purpose: a short history makes clients hit 410 Gone and relist.
# No pod-replacement backoff by default in tests (tests that need it set job_backoff_seconds).
TEST_CONFIG = {
    "history_size": 200,
    "bookmark_interval": 0.2,
    "seed": None,
    "job_backoff_seconds": 0.0,
}
# The node agent's quick restarts, heartbeats and stops, as in its own tests.
AGENT_TIMING = {
    "restart_backoff": 0.2,
    "restart_backoff_max": 1.0,
    "renew_seconds": 1.0,
    "shutdown_grace": 2.0,
}


def require_kubectl() -> str:
    """Path to kubectl; skip without it, but fail in CI where it must be present."""
    path = KUBECTL if os.path.exists(KUBECTL) else shutil.which("kubectl")
    if path:
        return path
    message = f"kubectl not found at {KUBECTL} or on PATH (Debian package kubernetes-client)"
    if is_ci():
        pytest.fail(message + "; CI is set, so this is a failure, not a skip")
    pytest.skip(message)


def eventually(fn: Callable[[], T], *, timeout: float = 5.0, interval: float = 0.02) -> T:
    """Poll fn until it returns a truthy value without raising (kubebuilder Eventually)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            result = fn()
            if result:
                return result
            last = result
        # ApiException and its subclasses (the client raises NotFoundException for a 404).
        except (
            AssertionError,
            LookupError,
            ValueError,
            TypeError,
            AttributeError,
            ApiException,
        ) as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s; last result: {last!r}")
        time.sleep(interval)


class EmulatorHandle(HandleBase):
    """What tests use: a running emulator plus client helpers."""

    backend = "emulator"  # as e2e.real.RealClusterHandle's "real" (e2e/backends.py)
    has_controllers = True  # its GC, Job, CronJob and ServiceAccount controllers always run

    def __init__(self, emulator: Emulator, *, agent: bool = True) -> None:
        super().__init__()
        self.emulator = emulator
        self._ns = itertools.count(1)
        # The scripted pods of this emulator's node agent (script, finish, killed...).
        self.executor = ScriptedPods()
        self.agent: NodeAgent | None = None
        if agent:
            self.agent = start_scripted_agent(
                Kube(self.api_client()),
                self.executor,
                emulator.workdir / "node",
                now=emulator.clock,
            )

    @property
    def url(self) -> str:
        return self.emulator.url

    @property
    def kubeconfig_path(self) -> Path:
        return self.emulator.kubeconfig_path

    @property
    def clock(self) -> Clock:
        return self.emulator.clock

    @property
    def faults(self) -> Any:
        return self.emulator.faults

    def _new_client(self) -> ApiClient:
        return self.emulator.api_client()

    def kubectl_binary(self) -> str:
        return require_kubectl()

    def _workdir(self) -> Path:
        return self.emulator.workdir

    def restart(self) -> None:
        self.emulator.restart()

    def require_controllers(self) -> None:
        """Nothing to check: the emulator's built-in controllers always run."""

    def namespace(self, prefix: str = "test") -> str:
        """Create a fresh namespace and return its name."""
        rt = self.emulator.registry.get("", "v1", "namespaces")
        assert rt is not None
        name = f"{prefix}-{next(self._ns)}-{os.getpid() % 1000}"
        self.emulator.api.create(rt, "", {"metadata": {"name": name}})
        return name

    def close(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        super().close()


def start_scripted_agent(
    kube: Kube,
    pods: ScriptedPods,
    workdir: Path,
    *,
    now: Clock | None = None,
    namespaces: tuple[str, ...] | None = None,
    node_name: str = "longrun-node",
    kubelet_tls: KubeletTLS | None = None,
    pods_capacity: int | None = None,
) -> NodeAgent:
    """A node agent that runs every pod it takes as a scripted container (`pods`); with
    `pods_capacity`, a node that takes at most that many pods (a full node)."""
    settings: dict[str, Any] = {
        "workdir": workdir,
        "node_name": node_name,
        "namespaces": namespaces,
        "scripted": pods,
        "kubelet_tls": kubelet_tls,
        **AGENT_TIMING,
    }
    if pods_capacity is not None:
        settings["capacity"] = {**default_capacity(), "pods": str(pods_capacity)}
    if now is not None:  # kubelet timestamps on the emulator's clock, as its controllers read
        settings["now"] = now.now
    return NodeAgent(AgentConfig(**settings), kube).start()


def scripted_pods_for(
    handle: KubeHandle, namespace: str, workdir: Path
) -> tuple[ScriptedPods, Callable[[], None]]:
    """Scripted pods for `namespace` and how to stop what runs them: on the emulator its own
    node agent's (nothing to stop); on a real control plane a node agent of the namespace's
    own, whose log server the API server trusts (`pods/log`), its Node deleted at stop."""
    if isinstance(handle, EmulatorHandle):
        return handle.executor, lambda: None
    from e2e.real.handle import RealClusterHandle

    assert isinstance(handle, RealClusterHandle)
    node, plane, pods = f"node-{namespace}", handle.plane, ScriptedPods()
    pair = plane.issue_kubelet_certificate(node, hostname=socket.gethostname())
    kube = Kube(handle.api_client())
    agent = start_scripted_agent(
        kube,
        pods,
        workdir,
        namespaces=(namespace,),
        node_name=node,
        kubelet_tls=KubeletTLS(pair.cert, pair.key, plane.ca_cert_path),
    )

    def stop() -> None:
        agent.stop()
        try:
            kube.core.delete_node(node)
        except ApiException as exc:
            if exc.status != 404:
                raise

    return pods, stop


def _start(*, agent: bool = True, **overrides: Any) -> tuple[Emulator, EmulatorHandle]:
    emulator = Emulator(EmulatorConfig(**{**TEST_CONFIG, **overrides})).start()
    try:
        return emulator, EmulatorHandle(emulator, agent=agent)
    except BaseException:
        emulator.stop()
        raise


@pytest.fixture
def kube_emulator() -> Iterator[EmulatorHandle]:
    """A fresh emulator per test."""
    emulator, handle = _start()
    try:
        yield handle
    finally:
        handle.close()
        emulator.stop()


@pytest.fixture
def kube_emulator_factory() -> Iterator[Callable[..., EmulatorHandle]]:
    """Start emulators with EmulatorConfig overrides, e.g. `factory(job_backoff_seconds=10)`;
    `factory(agent=False)` for one whose pods no node agent runs."""
    started: list[tuple[Emulator, EmulatorHandle]] = []

    def factory(**overrides: Any) -> EmulatorHandle:
        started.append(_start(**overrides))
        return started[-1][1]

    try:
        yield factory
    finally:
        for emulator, handle in started:
            handle.close()
            emulator.stop()


@pytest.fixture(scope="session")
def kube_emulator_session() -> Iterator[EmulatorHandle]:
    """One emulator for the session; isolate tests with `handle.namespace()`."""
    emulator, handle = _start()
    try:
        yield handle
    finally:
        handle.close()
        emulator.stop()


# -- the backend switch (e2e/backends.py): the same suites on the emulator or a real control plane


@pytest.fixture(scope="session")
def kube_emulator_backend_session() -> Iterator[EmulatorHandle]:
    """One emulator for the session with longrun's CRDs installed, like `kube_real_session`."""
    emulator, handle = _start()
    try:
        install_crds(handle.api_client())
        yield handle
    finally:
        handle.close()
        emulator.stop()


@pytest.fixture(scope="session")
def kube_real_session() -> Iterator[RealClusterHandle]:
    """One real control plane for the session (envtest style), longrun's CRDs installed.

    Skips, also in CI, with one line naming KUBEBUILDER_ASSETS when no binaries are found;
    fails when they are found but do not start.
    """
    try:
        assets = find_assets()
    except AssetsNotFound as exc:
        skip_real(str(exc))
    try:
        plane = ControlPlane(assets).start()
    except StartupError as exc:
        REAL_STATUS.outcome, REAL_STATUS.detail = "failed", str(exc).splitlines()[0]
        raise
    handle = RealClusterHandle(plane)
    try:
        install_crds(handle.api_client())
        REAL_STATUS.outcome = "ran"
        REAL_STATUS.detail = f"v{assets.version} from {assets.directory}" + (
            "" if plane.has_controllers else f" ({plane.missing_controllers})"
        )
        yield handle
    finally:
        handle.close()
        plane.stop()


@pytest.fixture
def kube_backend(request: pytest.FixtureRequest) -> KubeHandle:
    """The session handle of the backend `$LONGRUN_KUBE_BACKEND` selects (emulator by default).

    Isolate tests with `handle.namespace()`.
    """
    return _backend_handle(request, selected_backend())


@pytest.fixture(params=BACKENDS)
def kube_each_backend(request: pytest.FixtureRequest) -> KubeHandle:
    """The test runs once per backend: the emulator always, the real one when it can start."""
    return _backend_handle(request, request.param)


def _backend_handle(request: pytest.FixtureRequest, backend: str) -> KubeHandle:
    name = "kube_real_session" if backend == "real" else "kube_emulator_backend_session"
    handle: KubeHandle = request.getfixturevalue(name)
    return handle
