"""Fixtures for every test; the helpers live in tests/support.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO_ROOT

# The real model servers (kserve_server, triton_server, ...): session-scoped fixtures registered
# once here, so each server starts at most once per test session whoever uses it.
pytest_plugins = ["e2e.peers.fixtures"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder."""
    return REPO_ROOT
