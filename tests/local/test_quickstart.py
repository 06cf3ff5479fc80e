"""The README's first command, `bash scripts/quickstart`, end to end.

Real: the script, the KServe model server from its cached env (e2e/peers), SQLite, `longrun run`
and the runner. Faked: nothing. Skips locally when the KServe env cannot be built; fails in CI.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from e2e.peers import EnvBuildError, ensure_env
from e2e.peers.fixtures import skip_or_fail

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]


def test_quickstart_classifies_the_150_flowers_and_prints_the_table(repo_root: Path) -> None:
    try:
        ensure_env("kserve")
    except EnvBuildError as exc:
        skip_or_fail(f"kserve env unavailable: {exc}")
    done = subprocess.run(
        ["bash", "scripts/quickstart"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "InferenceRun default/iris-quickstart: Succeeded" in done.stderr
    assert "records: read=150 written=150 failed=0" in done.stderr
    match = re.search(r"^150 predictions, (\d+) match the labelled species$", done.stdout, re.M)
    assert match is not None, done.stdout
    assert int(match.group(1)) >= 140  # an sklearn iris model is ~97% right on its training set
    assert re.search(r"^ +1  5\.1 3\.5 1\.4 0\.2 +setosa +setosa$", done.stdout, re.M)
