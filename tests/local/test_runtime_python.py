"""Which interpreter runs a runtime's local server: the newest built peer env wins.

Real: `local.runtimes.find_python` on a cache directory laid out as `python -m e2e.peers
prepare` lays it out (ready files, bin/python). Faked: the envs themselves (empty
executables and empty package folders; nothing is run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from local.runtimes import find_python


def _env(root: Path, name: str, built_at: str, module: str | None = "pytriton") -> Path:
    env = root / name
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    if module:
        (env / "lib" / "python3.11" / "site-packages" / module).mkdir(parents=True)
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


def test_another_env_sharing_the_prefix_is_not_taken_for_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A `llama-server-<hash>` env (no llama_cpp) built after the `llama-<hash>` peer env: the
    # llama.cpp runtime must still start llama-cpp-python's server from `llama-<hash>`.
    monkeypatch.setenv("LONGRUN_PEERS_CACHE", str(tmp_path))
    monkeypatch.delenv("LONGRUN_LLAMACPP_PYTHON", raising=False)
    peer = _env(tmp_path, "llama-92ddffcea52b", "2026-11-01T08:00:00Z", "llama_cpp")
    _env(tmp_path, "llama-server-0123456789ab", "2026-11-25T08:00:00Z", None)
    assert find_python("llamacpp", {}) == str(peer)


def test_a_ready_env_without_the_server_module_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGRUN_PEERS_CACHE", str(tmp_path))
    monkeypatch.delenv("LONGRUN_TRITON_PYTHON", raising=False)
    older = _env(tmp_path, "triton-ffffffffffff", "2026-11-01T08:00:00Z")
    _env(tmp_path, "triton-000000000000", "2026-11-25T08:51:25Z", None)
    assert find_python("triton", {}) == str(older)
