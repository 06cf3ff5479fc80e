"""The CI guard: a missing service skips locally but fails in CI; the two exceptions are the
real control plane (e2e/backends.py) and Kueue's manager (e2e/kueue), which CI machines do
not carry.

Real: pytest itself, run in a subprocess (pytester) with and without CI set, importing
the real `tests.support` helper and the real `kube_real_session` and `kueue_assets` fixtures.
Faked: the service — the probe declares it unavailable; KUBEBUILDER_ASSETS and KUEUE_ASSETS
name an empty directory.
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


REAL_PROBE = """
from e2e.fixtures import kube_real_session

def test_needs_the_real_control_plane(kube_real_session):
    pass
"""


KUEUE_PROBE = """
from e2e.kueue.fixtures import kueue_assets

def test_needs_kueue(kueue_assets):
    pass
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, probe: str = PROBE
) -> pytest.RunResult:
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(test_probe=probe)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "test_probe.py")


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


def test_missing_real_control_plane_skips_even_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(pytester.path))
    result = _run(pytester, monkeypatch, ci="true", probe=REAL_PROBE)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*real control plane: no kube-apiserver/etcd in $KUBEBUILDER_ASSETS=*; set "
         "KUBEBUILDER_ASSETS to a directory holding them to run*"]
    )  # fmt: skip


def test_missing_kueue_skips_even_in_ci_in_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUEUE_ASSETS", str(pytester.path))
    result = _run(pytester, monkeypatch, ci="true", probe=KUEUE_PROBE)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*kueue: no kueue manager with crds/ in $KUEUE_ASSETS=*; set KUEUE_ASSETS to a "
         "directory holding them to run*"]
    )  # fmt: skip
