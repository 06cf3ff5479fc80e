"""Helpers shared by every test package.

Services the CI machine has (PostgreSQL, MariaDB, kubectl, model servers) may be absent
on a laptop: tests that need one skip there with a clear reason, but in CI (env CI set)
a missing service is a failure, so a broken setup can never pass as "skipped".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.ci import is_ci

REPO_ROOT = Path(__file__).resolve().parent.parent


def in_ci() -> bool:
    """True when running in CI, where every service must be present."""
    return is_ci()


def service_unavailable(reason: str) -> None:
    """Skip the current test (locally) or fail it (in CI) because a service is missing."""
    message = f"service unavailable: {reason}"
    if in_ci():
        pytest.fail(f"{message} (CI must have it)", pytrace=False)
    pytest.skip(message)
