"""Fixtures for every test; the helpers live in tests/support.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO_ROOT


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's top folder."""
    return REPO_ROOT
