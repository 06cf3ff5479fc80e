"""The README's second quickstart, `bash scripts/quickstart-serving`, end to end.

Real: the script, llama-cpp-python from its cached env (e2e/peers), a tiny GGUF model
written by the `gguf` package, `longrun run` starting the ModelDeployment it uses (the
controller's serving core, longrun-fetch, the local executor) and the runner. Faked:
nothing (the model's weights are random: the text is nonsense). Skips locally when the
llama env cannot be built; fails in CI.
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


def test_quickstart_serves_a_tiny_model_and_answers_100_prompts(repo_root: Path) -> None:
    try:
        ensure_env("llama")
    except EnvBuildError as exc:
        skip_or_fail(f"llama env unavailable: {exc}")
    done = subprocess.run(
        ["bash", "scripts/quickstart-serving"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting ModelDeployment default/tiny-chat for this run" in done.stderr
    assert "InferenceRun default/tiny-chat-prompts: Succeeded" in done.stderr
    assert "records: read=100 written=100 failed=0" in done.stderr
    assert re.search(r"^100 answers$", done.stdout, re.M), done.stdout
    assert not list((repo_root / ".longrun/quickstart-serving").glob("serving/*/*/serving.json"))
