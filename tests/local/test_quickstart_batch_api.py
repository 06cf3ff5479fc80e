"""The README's Batch API quickstart, `bash scripts/quickstart-batch-api`, end to end.

Real: the script, `longrun batch-api --local` as a process, the quickstart's program driving
it with the official `openai` client (only base_url and api_key changed), `longrun run` for
the batch serving the tiny GGUF model with llama-cpp-python from its cached env (e2e/peers),
and the runner. Faked: nothing (the model's weights are random: the text is nonsense). Skips
locally when the llama env cannot be built; fails in CI.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from e2e.peers import EnvBuildError, ensure_env
from e2e.peers.fixtures import skip_or_fail


@pytest.mark.slow
@pytest.mark.requires_service
def test_quickstart_runs_a_100_request_batch_from_an_openai_program(repo_root: Path) -> None:
    try:
        ensure_env("llama")
    except EnvBuildError as exc:
        skip_or_fail(f"llama env unavailable: {exc}")
    done = subprocess.run(
        ["bash", "scripts/quickstart-batch-api"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert re.search(
        r"^batch batch_[0-9a-f]{32}: completed .*completed=100, failed=0, total=100",
        done.stdout,
        re.M,
    ), done.stdout
    answers = re.findall(r"^q(\d+): ", done.stdout, re.M)
    assert sorted(map(int, answers)) == list(range(100))
    assert re.search(r"^100 answers, 0 failed$", done.stdout, re.M)
    work = repo_root / ".longrun/quickstart-batch-api"
    assert not list(work.glob("serving/*/*/serving.json"))  # the model server was stopped
    program = (repo_root / "testdata/quickstart-batch-api/batch.py").read_text()
    assert program.count("os.environ") == 2  # base_url and api_key, nothing else differs


def test_the_readme_shows_the_quickstart_program(repo_root: Path) -> None:
    program = (repo_root / "testdata/quickstart-batch-api/batch.py").read_text()
    shown = program[program.index("client = OpenAI(") :].rstrip()
    readme = (repo_root / "README.md").read_text()
    assert f"```python\n{shown}\n```" in readme
