"""Fixtures for every test; the helpers live in tests/support.py.

The real stores every package's tests share (the runner's and the end-to-end suite):
PostgreSQL and MariaDB on the machine, moto's S3 server in a thread. Skipped when
absent, failed when absent in CI (tests/runners/runner_stores.py holds the rule).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.backends import REAL_STATUS
from e2e.kueue.assets import KUEUE_STATUS
from tests.runners.runner_stores import (
    MARIADB_URLS,
    POSTGRES_URLS,
    first_reachable,
    unavailable,
)
from tests.support import REPO_ROOT

# Every emulator of the tests (in process, or `python -m e2e.cluster` inheriting this) checks
# when it stops that no stored object version was changed in place: readers share stored
# dicts (e2e/emulator/store.py), so a caller mutating one would corrupt what others see.
os.environ.setdefault("KUBE_EMULATOR_AUDIT", "1")

# The real model servers (kserve_server, triton_server, ...): session-scoped fixtures registered
# once here, so each server starts at most once per test session whoever uses it.
pytest_plugins = ["e2e.peers.fixtures"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """URL of the local PostgreSQL `test` database."""
    url = first_reachable(POSTGRES_URLS)
    if url is None:
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432 (database `test`)")
    assert url is not None
    return url


@pytest.fixture(scope="session")
def mariadb_url() -> str:
    """URL of the local MariaDB `test` database."""
    url = first_reachable(MARIADB_URLS)
    if url is None:
        unavailable("MariaDB is not reachable on 127.0.0.1:3306 (database `test`)")
    assert url is not None
    return url


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of moto's S3 server, running in a thread on a random port."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    if server._server is not None:
        server._server.server_close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say whether the real control plane and Kueue ran, or why not: their skips are the ones
    CI allows."""
    if REAL_STATUS.outcome:
        terminalreporter.write_line(f"real backend: {REAL_STATUS.outcome}: {REAL_STATUS.detail}")
    if KUEUE_STATUS.outcome:
        terminalreporter.write_line(f"kueue: {KUEUE_STATUS.outcome}: {KUEUE_STATUS.detail}")
