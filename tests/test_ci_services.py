"""The CI guard: a missing service skips locally but fails in CI.

Real: pytest itself, run in a subprocess (pytester) with and without CI set, importing
the real `tests.support` helper. Faked: the service — the probe declares it unavailable.
"""

from __future__ import annotations

import pytest

from tests.support import REPO_ROOT

pytest_plugins = ["pytester"]

PROBE = """
from tests.support import service_unavailable

def test_needs_database():
    service_unavailable("PostgreSQL at 127.0.0.1:5432 refused the connection")
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str) -> pytest.RunResult:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(test_probe=PROBE)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_probe.py")


def test_missing_service_skips_outside_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, ci="")
    result.assert_outcomes(skipped=1)


def test_missing_service_fails_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, ci="true")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*service unavailable: PostgreSQL*CI must have it*"])
