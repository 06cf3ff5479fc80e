"""Fixtures for the node agent's tests: every scenario on both backends, one agent per test.

Real: the node agent (e2e/nodeagent) running pods as local processes (`python -c ...`,
through local/podspec and local/executor), talking HTTP to either backend: the API
emulator without its own node agent (`agent=False`), or, when its binaries
are found, a private kube-apiserver + etcd + kube-controller-manager (e2e/real), whose
Job controller, garbage collector and PodSecurity admission act on the agent's pods.
Faked: nothing; the emulator's Job back-off base is 1 s (the real controller's is 10 s)
so its back-off is visible without a long wait. Each test has its own namespace and its
own Node (the real control plane is shared by the session); the Node is deleted after.
The test's pods name that Node as their `schedulerName`, and its agent binds only those:
another agent on the same control plane (a session-wide one serving every namespace for
`default-scheduler` pods) can then never take them, nor this one another test's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from e2e.backends import KubeHandle
from e2e.fixtures import *  # noqa: F403
from e2e.fixtures import AGENT_TIMING, eventually
from e2e.nodeagent import AgentConfig, Kube, NodeAgent

Obj = dict[str, Any]
BACKENDS = ("emulator", "real")
TIMEOUT = 30.0


@dataclass
class Cluster:
    """One backend, a fresh namespace, clients, and a node agent serving that namespace."""

    handle: KubeHandle
    ns: str
    tmp: Path
    api: client.ApiClient
    core: Any
    batch: Any
    agents: list[NodeAgent] = field(default_factory=list)

    @property
    def backend(self) -> str:
        return self.handle.backend

    @property
    def node_name(self) -> str:
        return f"node-{self.ns}"

    @property
    def agent(self) -> NodeAgent:
        return self.agents[-1]

    def start_agent(self, **overrides: Any) -> NodeAgent:
        """A node agent serving this namespace, stopped after the test."""
        settings = {
            "workdir": self.tmp / f"agent-{len(self.agents)}",
            "node_name": self.node_name,
            "namespaces": (self.ns,),
            "scheduler_names": (self.node_name,),
            **AGENT_TIMING,
            **overrides,
        }
        agent = NodeAgent(AgentConfig(**settings), Kube(self.handle.api_client()))
        self.agents.append(agent)
        return agent.start()

    # -- pods and Jobs ---------------------------------------------------------------------
    def python_pod(self, name: str, script: str, **spec: Any) -> Obj:
        """A pod of this test's scheduler (its agent) running `python -c script`."""
        return python_pod(name, script, schedulerName=self.node_name, **spec)

    def create_pod(self, name: str, script: str, **spec: Any) -> Obj:
        return self.core.create_namespaced_pod(  # type: ignore[no-any-return]
            self.ns, self.python_pod(name, script, **spec), _preload_content=False
        )

    def pod(self, name: str) -> Obj | None:
        """The pod as JSON, or None when it is gone."""
        try:
            answer = self.core.read_namespaced_pod(name, self.ns, _preload_content=False)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return json_of(answer)

    def wait_pod(self, name: str, test: Callable[[Obj], bool], *, timeout: float = TIMEOUT) -> Obj:
        def check() -> Obj | None:
            pod = self.pod(name)
            return pod if pod is not None and test(pod) else None

        result: Obj = eventually(check, timeout=timeout)
        return result

    def wait_phase(self, name: str, *phases: str, timeout: float = TIMEOUT) -> Obj:
        return self.wait_pod(name, lambda p: phase(p) in phases, timeout=timeout)

    def wait_gone(self, name: str, *, timeout: float = TIMEOUT) -> None:
        eventually(lambda: self.pod(name) is None, timeout=timeout)

    def create_job(self, name: str, script: str, **job_spec: Any) -> None:
        template = {"spec": self.python_pod(name, script)["spec"]}
        body = {"metadata": {"name": name}, "spec": {"template": template, **job_spec}}
        self.batch.create_namespaced_job(self.ns, body, _preload_content=False)

    def job(self, name: str) -> Obj:
        return json_of(self.batch.read_namespaced_job(name, self.ns, _preload_content=False))

    def wait_job(self, name: str, condition: str, *, timeout: float = 60.0) -> Obj:
        def check() -> Obj | None:
            job = self.job(name)
            return job if condition_of(job, condition) else None

        result: Obj = eventually(check, timeout=timeout)
        return result

    def job_pods(self, job: str) -> list[Obj]:
        answer = self.core.list_namespaced_pod(
            self.ns, label_selector=f"job-name={job}", _preload_content=False
        )
        return list(json_of(answer)["items"])

    def record(self, plural: str, name: str) -> Recorder:
        """Every version of one object from now on (a watch), until the recorder stops."""
        lister = self.batch.list_namespaced_job if plural == "jobs" else None
        lister = lister or self.core.list_namespaced_pod
        return Recorder(lister, self.ns, name).start()


class Recorder:
    """Collects each version of an object a watch delivers (its `status`, in order)."""

    def __init__(self, lister: Any, namespace: str, name: str) -> None:
        self._lister, self._ns, self._name = lister, namespace, name
        self._watch = watch.Watch()
        self.versions: list[Obj] = []
        self._open = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Recorder:
        self._thread.start()
        self._open.wait(5)
        return self

    def _run(self) -> None:
        self._open.set()
        stream = self._watch.stream(
            self._lister,
            self._ns,
            field_selector=f"metadata.name={self._name}",
            timeout_seconds=120,
        )
        try:
            for event in stream:
                self.versions.append(event["raw_object"])
        except ProtocolError:
            if not self._stopped.is_set():  # stop() cuts the connection; anything else fails
                raise

    def stop(self, until: Callable[[Obj], bool] | None = None) -> list[Obj]:
        """The statuses seen; with `until`, first wait (30 s at most) for a status it accepts:
        the watch can deliver a version after a GET has already shown it."""
        if until is not None:
            eventually(
                lambda: any(until(v.get("status") or {}) for v in list(self.versions)), timeout=30
            )
        self._stopped.set()
        self._watch.stop()
        self._thread.join(timeout=5)
        return [v.get("status") or {} for v in self.versions]


def json_of(answer: Any) -> Obj:
    import json

    data: Obj = json.loads(answer.data)
    return data


def python_pod(name: str, script: str, **spec: Any) -> Obj:
    """A pod whose one container runs `python -c script` (on this machine, via the agent)."""
    container = {"name": "main", "image": "python:3.11-slim", "command": ["python", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def terminated(pod: Obj) -> Obj:
    """The first container's `state.terminated` (empty when it has not ended)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict((statuses[0].get("state") or {}).get("terminated") or {})


def condition_of(obj: Obj, type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == "True":
            return dict(cond)
    return None


def pod_condition(pod: Obj, type_: str) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("status"))
    return ""


def backend_handle(request: pytest.FixtureRequest, backend: str) -> KubeHandle:
    """The real session control plane (skips without binaries), or a fresh emulator whose
    pods nothing runs but a node agent."""
    if backend == "real":
        handle: KubeHandle = request.getfixturevalue("kube_real_session")
        handle.require_controllers()
        return handle
    factory = request.getfixturevalue("kube_emulator_factory")
    emulator: KubeHandle = factory(agent=False, job_backoff_seconds=1.0)
    return emulator


@pytest.fixture(params=BACKENDS)
def kube(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A backend (the test runs on each) with a fresh namespace; no agent yet."""
    yield from _cluster(request, request.param, tmp_path)


@pytest.fixture
def real_kube(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """The real control plane only (what the emulator does not have: PodSecurity admission)."""
    yield from _cluster(request, "real", tmp_path)


@pytest.fixture
def emulated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """The emulator only (what the real server does not offer: fault injection), an agent
    running."""
    for cluster in _cluster(request, "emulator", tmp_path):
        cluster.start_agent()
        yield cluster


def _cluster(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[Cluster]:
    handle = backend_handle(request, backend)
    api = handle.api_client()
    cluster = Cluster(
        handle=handle,
        ns=handle.namespace("nodeagent"),
        tmp=tmp_path,
        api=api,
        core=client.CoreV1Api(api),
        batch=client.BatchV1Api(api),
    )
    try:
        yield cluster
    finally:
        for agent in cluster.agents:
            agent.stop()
        _remove_node(cluster)


@pytest.fixture
def cluster(kube: Cluster) -> Cluster:
    """`kube` with a node agent running."""
    kube.start_agent()
    return kube


def _remove_node(cluster: Cluster) -> None:
    """Keep the shared control plane tidy: the test's Node goes (its Lease with it, by GC)."""
    try:
        cluster.core.delete_node(cluster.node_name, _preload_content=False)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
