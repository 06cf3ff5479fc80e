"""The harness itself: cache keys, env reuse, CI detection, start failures, clean stops.

Real: the file system cache layout, lock and marker files, and (for the process tests) the real
KServe server from its cached env, its process group and log. Faked: nothing but a hand-written
marker for the reuse test (so it runs without building an env) and a port held busy on purpose.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path

import pytest

from e2e.peers import ENVS, EnvBuildError, PeerStartError, UnknownPeerError, ensure_env, start
from e2e.peers.envs import MARKER, env_key, env_path, is_ready
from e2e.peers.fixtures import is_ci, skip_or_fail
from e2e.peers.specs import env_names_for, server_spec


def _require_kserve_env() -> None:
    try:
        ensure_env("kserve")
    except EnvBuildError as exc:
        skip_or_fail(f"kserve env unavailable: {exc}")


def test_env_key_changes_when_a_pin_changes() -> None:
    spec = ENVS["kserve"]
    bumped = dataclasses.replace(spec, requirements=("kserve==0.21.1", "scikit-learn==1.9.1"))
    assert env_key(spec).startswith("kserve-")
    assert env_key(spec) == env_key(dataclasses.replace(spec))
    assert env_key(bumped) != env_key(spec)


def test_env_key_covers_removals_and_the_setup_script() -> None:
    spec = ENVS["vllm"]
    assert spec.setup_path is not None and spec.setup_path.is_file()
    fewer = dataclasses.replace(spec, remove=("torchvision",))
    other = dataclasses.replace(spec, setup="llama_server.py")  # another script, other text
    assert len({env_key(spec), env_key(fewer), env_key(other)}) == 3


def test_an_api_key_goes_only_to_servers_that_take_one() -> None:
    assert server_spec("vllm").api_key_env == "VLLM_API_KEY"
    with pytest.raises(ValueError, match="server kserve takes no API key"):
        start("kserve", api_key="secret")


def test_ready_env_is_reused_without_building(tmp_path: Path) -> None:
    path = env_path("triton", cache_dir=tmp_path)
    path.mkdir(parents=True)
    (path / MARKER).write_text(json.dumps({"libdir": "/opt/python/lib"}))
    env = ensure_env("triton", cache_dir=tmp_path)
    assert not env.built_now
    assert env.path == path
    assert env.libdir == "/opt/python/lib"


def test_env_without_marker_is_not_ready(tmp_path: Path) -> None:
    path = env_path("mlserver", cache_dir=tmp_path)
    (path / "bin").mkdir(parents=True)  # what an interrupted in-place build would leave
    assert not is_ready(path)


def test_cache_dir_comes_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGRUN_PEERS_CACHE", str(tmp_path))
    assert env_path("llama").parent == tmp_path


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", False), ("0", False), ("false", False), ("NO", False), ("1", True), ("true", True)],
)
def test_is_ci_reads_ci_variable(
    value: str, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", value)
    assert is_ci() is expected


def test_server_names_map_to_their_envs_once() -> None:
    names = env_names_for(["llama-chat", "llama-embeddings", "kserve", "llama"])
    assert names == ["llama", "kserve"]


def test_llama_server_env_is_not_named_like_the_llama_env() -> None:
    # local/runtimes.py finds the llama env as `llama-<12 hex>`; `llamacpp-...` never matches.
    assert env_key(ENVS["llamacpp"]).startswith("llamacpp-")
    assert server_spec("llama-server").env == "llamacpp"


def test_unknown_name_is_rejected_with_the_known_ones() -> None:
    with pytest.raises(UnknownPeerError, match="kserve"):
        server_spec("torchserve")
    with pytest.raises(UnknownPeerError, match="torchserve"):
        env_names_for(["torchserve"])


@pytest.mark.requires_service
def test_stop_leaves_no_process_in_the_server_group() -> None:
    _require_kserve_env()
    with start("kserve") as server:
        assert server.is_running()
        pgid = server.process.pid
    assert server.process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


@pytest.mark.requires_service
def test_start_failure_reports_the_server_log_tail() -> None:
    _require_kserve_env()
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PeerStartError, match=r"(?s)log .*kserve") as caught:
            start("kserve", ports={"grpc": port}, timeout=30)
    assert "Failed to bind" in str(caught.value)  # gRPC's own error, from the log tail
