"""Fixtures for the end-to-end suite: the whole system, real stores, the examples.

Real: everything. A Kubernetes — the API emulator (e2e/emulator), or with
LONGRUN_KUBE_BACKEND=real a private kube-apiserver, etcd and kube-controller-manager
(e2e/real) — whose Job and CronJob controllers create pods that the node agent
(e2e/nodeagent) runs, `longrun controller` as a process, the real runner as the pods'
process, `kubectl` for every user action, real model
servers (e2e/peers), moto's S3 server, PostgreSQL on the machine, local files.
The examples of testdata/examples are applied as shipped except for what only a
cluster has: service DNS names become 127.0.0.1 URLs, table names and namespaces
become unique per test, file paths point into the test's directory.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.system import System
from tests.runners.runner_stores import drop_tables
from tests.support import REPO_ROOT

EXAMPLES = REPO_ROOT / "testdata" / "examples"
Obj = dict[str, Any]


@pytest.fixture
def start_system(tmp_path: Path) -> Iterator[Callable[..., System]]:
    """`start_system(clock_start=None)`: a running System on the backend LONGRUN_KUBE_BACKEND
    names (the emulator when a clock start is given), stopped after the test."""
    started: list[System] = []

    def start(*, clock_start: datetime | None = None) -> System:
        backend = "emulator" if clock_start is not None else None
        system = System(
            tmp_path / f"system-{len(started)}", clock_start=clock_start, backend=backend
        )
        started.append(system)
        return system.start()

    yield start
    for system in started:
        system.stop()


@pytest.fixture
def system(start_system: Callable[..., System]) -> System:
    """The whole system (on the emulator, its clock at wall time)."""
    return start_system()


@pytest.fixture
def table_prefix(postgres_url: str) -> Iterator[str]:
    """A unique table-name prefix; its tables are dropped after the test."""
    prefix = f"e2e_{uuid.uuid4().hex[:10]}"
    yield prefix
    drop_tables(postgres_url, prefix)


def example(name: str) -> list[Obj]:
    """The objects of testdata/examples/<name>.yaml (or <dir>/<dir>.yaml), in file order."""
    path = EXAMPLES / f"{name}.yaml"
    if not path.exists():
        path = EXAMPLES / name / f"{name}.yaml"
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    """The object of `kind` (and `name`) among `objects`."""
    for obj in objects:
        if obj["kind"] == kind and name in (None, obj["metadata"]["name"]):
            return obj
    raise LookupError(f"no {kind} {name or ''} in the example")


def apply(system: System, namespace: str, objects: list[Obj]) -> None:
    """`kubectl apply -n NAMESPACE -f -` of the objects, moved to `namespace`."""
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    system.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objects))
