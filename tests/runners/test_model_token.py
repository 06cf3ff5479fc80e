"""The runner sends its ServiceAccount token (`model.auth.serviceAccountToken`) and follows
the file when the kubelet replaces it.

Real: `runners.cli.main` in-process (contract file in, exit code and termination message
out), the kserve-v1 HTTP client and its connection pool, file storage, a local HTTP model
stand-in on 127.0.0.1 recording every request's Authorization header. Faked: the kubelet,
by writing the token file (and replacing it, as its atomic swap does: a new inode) from the
stand-in's handler after a few requests; the file check interval is set to 0 so the
replacement is seen by the next request instead of up to CHECK_SECONDS later.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import contract
from http_stub import serve

from contracts.auth import MODEL_TOKEN_PATH_ENV
from runners import cli
from runners.api import ConfigError
from runners.models import common

RECORDS = 12
SWAP_AFTER = 4
OLD, NEW = "eyJhbGciOiJSUzI1NiJ9.old-claims.sig", "eyJhbGciOiJSUzI1NiJ9.new-claims.sig"


@pytest.fixture
def token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "model-token" / "token"
    path.parent.mkdir()
    monkeypatch.setenv(MODEL_TOKEN_PATH_ENV, str(path))
    monkeypatch.setattr(common, "CHECK_SECONDS", 0.0)
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return path


def replace(path: Path, text: str) -> None:
    """Write `text` as the kubelet does: a new file moved over the old one."""
    fresh = path.with_name("..new")
    fresh.write_text(text)
    os.replace(fresh, path)


@pytest.fixture
def model(token_file: Path) -> Iterator[tuple[str, list[str]]]:
    """A kserve-v1 model that records Authorization headers and swaps the token after
    SWAP_AFTER requests."""
    seen: list[str] = []

    def handler(method: str, path: str, query: Any, body: Any, headers: dict[str, str]) -> Any:
        seen.append(headers.get("Authorization", ""))
        if len(seen) == SWAP_AFTER:
            replace(token_file, NEW + "\n")
        return 200, {}, {"predictions": [1 for _ in body["instances"]]}

    with serve(handler) as url:
        yield url, seen


def token_contract(tmp_path: Path, url: str, **auth: Any) -> Path:
    rows = "".join(json.dumps({"id": i, "x": [1.0, 2.0]}) + "\n" for i in range(RECORDS))
    (tmp_path / "in.jsonl").write_text(rows)
    doc = contract(
        input={"file": {"path": str(tmp_path / "in.jsonl"), "idField": "id"}},
        output={"file": {"path": str(tmp_path / "out")}},
        runner={"batchSize": 1, "concurrency": 1},
        model={
            "protocol": "kserve-v1",
            "url": url,
            "name": "iris",
            "auth": {"serviceAccountToken": {"audience": "models.example"}, **auth},
        },
    )
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(doc))
    return path


def test_requests_carry_the_token_and_the_new_one_once_the_file_is_replaced(
    tmp_path: Path, token_file: Path, model: tuple[str, list[str]]
) -> None:
    url, seen = model
    replace(token_file, OLD + "\n")
    assert cli.main(["--contract", str(token_contract(tmp_path, url))]) == 0
    assert len(seen) == RECORDS
    assert seen[:SWAP_AFTER] == [f"Bearer {OLD}"] * SWAP_AFTER
    assert seen[SWAP_AFTER:] == [f"Bearer {NEW}"] * (RECORDS - SWAP_AFTER)


def test_a_token_can_go_as_x_api_key(
    tmp_path: Path, token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, str]] = []

    def handler(method: str, path: str, query: Any, body: Any, headers: dict[str, str]) -> Any:
        seen.append(headers)
        return 200, {}, {"predictions": [1 for _ in body["instances"]]}

    replace(token_file, OLD)
    with serve(handler) as url:
        assert cli.main(["--contract", str(token_contract(tmp_path, url, header="X-API-Key"))]) == 0
    assert {h.get("X-API-Key") for h in seen} == {OLD}
    assert not any("Authorization" in h for h in seen)


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_a_missing_or_empty_token_stops_the_run_with_exit_2_naming_the_field(
    tmp_path: Path,
    token_file: Path,
    model: tuple[str, list[str]],
    capsys: pytest.CaptureFixture[str],
    content: str | None,
) -> None:
    if content is not None:
        token_file.write_text(content)
    url, seen = model
    assert cli.main(["--contract", str(token_contract(tmp_path, url))]) == 2
    err = capsys.readouterr().err
    assert "model.auth.serviceAccountToken" in err and str(token_file) in err
    assert "model.auth.secretRef" in err  # what to do instead
    summary = json.loads((tmp_path / "termination-log").read_text())
    assert "model.auth.serviceAccountToken" in summary["reason"]
    assert seen == []


def test_the_file_is_looked_at_once_per_interval_and_a_vanished_file_keeps_the_last_token(
    tmp_path: Path,
) -> None:
    path = tmp_path / "token"
    path.write_text(OLD)
    now = [100.0]
    token = common.TokenFile(str(path), check_seconds=5.0, clock=lambda: now[0])
    replace(path, NEW)
    assert token.current() == OLD  # within the interval: no stat
    now[0] += 5.0
    assert token.current() == NEW
    path.unlink()
    now[0] += 5.0
    assert token.current() == NEW  # the kubelet between two writes: the last one holds
    with pytest.raises(ConfigError, match=r"model\.auth\.serviceAccountToken"):
        common.TokenFile(str(path))


def test_the_token_never_shows_in_what_the_runner_prints(
    tmp_path: Path, token_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def handler(method: str, path: str, query: Any, body: Any, headers: dict[str, str]) -> Any:
        return 401, {}, {"error": f"token {headers.get('Authorization')} not accepted"}

    replace(token_file, OLD)
    with serve(handler) as url:
        assert cli.main(["--contract", str(token_contract(tmp_path, url))]) == 2
    printed = capsys.readouterr()
    summary = (tmp_path / "termination-log").read_text()
    assert OLD not in printed.err + printed.out + summary
    assert "HTTP 401" in summary
