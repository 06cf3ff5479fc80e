"""Fixtures for controller integration tests: the API emulator with longrun's CRDs installed.

Real: the emulator (API server semantics, Job/CronJob/GC controllers, scripted
pods), the official Python client, the controller's informers, queue, leader
election and reconciler. Faked: nothing in the controller; pods "run" through
the emulator's scripted executor instead of containers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.fixtures import EmulatorHandle, kube_emulator  # noqa: F401
from tests.controller.emulated.harness import Env


@pytest.fixture
def env(kube_emulator: EmulatorHandle) -> Iterator[Env]:  # noqa: F811
    """A fresh emulator with the CRDs, a namespace, and a way to start controllers."""
    environment = Env.create(kube_emulator)
    try:
        yield environment
    finally:
        environment.close()
