"""pytest fixtures for tests with Kueue: its assets, and the whole system with Kueue running.

`kueue_assets` skips (also in CI) with one line naming KUEUE_ASSETS when Kueue's manager is
not here. `start_queued_system(**env)` starts `e2e.system.System` on a real control plane
(which it needs: no emulator runs Kueue) with Kueue's manager started before the controller,
so the controller finds Kueue's API at its start; `env` are the controller's settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.kueue.assets import KUEUE_STATUS, KueueAssets, KueueNotFound, find_kueue, skip_kueue
from e2e.kueue.manager import KueueManager
from e2e.system import System

QueuedSystem = tuple[System, KueueManager]


@pytest.fixture(scope="session")
def kueue_assets() -> KueueAssets:
    """Kueue's manager, CRDs and webhook manifests; skips (also in CI) when absent."""
    try:
        return find_kueue()
    except KueueNotFound as exc:
        skip_kueue(str(exc))


@pytest.fixture
def start_queued_system(
    kueue_assets: KueueAssets, tmp_path: Path
) -> Iterator[Callable[..., QueuedSystem]]:
    """`start_queued_system(**env)`: a running System with Kueue, stopped after the test."""
    started: list[System] = []

    def start(**env: str) -> QueuedSystem:
        managers: list[KueueManager] = []

        def with_kueue(system: System) -> None:
            managers.append(KueueManager(kueue_assets, system.plane).start())

        system = System(
            tmp_path / f"system-{len(started)}",
            backend="real",
            env=env,
            before_controller=with_kueue,
        )
        started.append(system)
        system.start()
        KUEUE_STATUS.outcome = "ran"
        KUEUE_STATUS.detail = f"v{kueue_assets.version} from {kueue_assets.directory}"
        return system, managers[0]

    yield start
    for system in started:
        system.stop()
