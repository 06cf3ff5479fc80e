"""Which interpreter runs a runtime's local server: the newest built peer env wins.

Real: `local.runtimes.find_python` on a cache directory laid out as `python -m e2e.peers
prepare` lays it out (ready files, bin/python). Faked: the envs themselves (empty
executables; nothing is run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local.runtimes import find_python


def _env(root: Path, name: str, built_at: str) -> Path:
    env = root / name
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    (env / ".longrun-ready.json").write_text(json.dumps({"name": "triton", "built_at": built_at}))
    return env / "bin" / "python"


def test_the_env_built_last_wins_whatever_its_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGRUN_PEERS_CACHE", str(tmp_path))
    monkeypatch.delenv("LONGRUN_TRITON_PYTHON", raising=False)
    _env(tmp_path, "triton-ffffffffffff", "2026-11-01T08:00:00Z")  # old pins, larger hash
    newest = _env(tmp_path, "triton-000000000000", "2026-11-25T08:51:25Z")
    assert find_python("triton", {}) == str(newest)


def test_an_override_beats_every_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGRUN_PEERS_CACHE", str(tmp_path))
    _env(tmp_path, "triton-000000000000", "2026-11-25T08:51:25Z")
    assert find_python("triton", {"triton": "/opt/py"}) == "/opt/py"
