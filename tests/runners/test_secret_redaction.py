"""Values from Secrets never show (issue 17, "Credentials in URLs"): not in the summary the
controller copies to `status.result`, not in the log, not in a reason; and a URL read from a
Secret may not carry `user:password@`.

Real: the runner in-process (contract file -> exit code, termination message, stdout and
stderr), the krateo backend, the KServe v2 REST client, stdlib HTTP servers on 127.0.0.1,
and Secret files laid out as the controller mounts them. Faked: storage, where noted (the
memory backend registered as kind `memory`), and the model, where noted (FakeModel).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeModel, contract
from loopback_servers import Answer, serve_at
from memory_backend import MemoryBackend, MemoryStore

from runners import cli, redact, registry
from runners.api import RunContext
from runners.secrets import read_secret

API_KEY = "sk-live-5e3c9a71"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return tmp_path


@pytest.fixture
def memory() -> Iterator[MemoryStore]:
    store = MemoryStore(inputs=[{"x": float(i)} for i in range(3)])
    registry.storage_backends.register("memory", lambda: MemoryBackend(store))
    yield store
    registry.storage_backends.unregister("memory")


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    model = FakeModel()
    registry.model_protocols.register("kserve-v2", model.factory)
    yield model
    registry.model_protocols.unregister("kserve-v2")


def secret(env: Path, name: str, key: str, value: str) -> None:
    (env / "secrets" / name).mkdir(parents=True, exist_ok=True)
    (env / "secrets" / name / key).write_text(value)


def run(env: Path, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Exit code and summary."""
    path = env / "contract.json"
    path.write_text(json.dumps({**doc, "secretsDir": str(env / "secrets")}))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((env / "termination-log").read_text())


def krateo(path: str) -> dict[str, Any]:
    return {"krateo": {"api": {"endpointRef": {"name": "finops"}, "path": path}}}


def finops(method: str, path: str, headers: Mapping[str, str]) -> Answer:
    """Krateo's handler: records for the input notebook, 404 for an output it lacks."""
    if path.endswith("input"):
        return 200, {}, {"result": [{"v": 1}, {"v": 2}]}
    return 404, {}, {"detail": "no such notebook"}


@pytest.mark.usefixtures("fake_model")
def test_krateo_server_url_shows_neither_in_the_summary_nor_in_the_log(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve_at("127.0.0.1", finops) as (url, _):
        server_url = f"{url}/"
        secret(env, "finops", "server-url", server_url)
        doc = contract(input=krateo("/compute/in-input"), output=krateo("/compute/out"))
        code, summary = run(env, doc)
    printed = capsys.readouterr()
    assert code == 2, summary  # the output notebook answered 404
    assert "HTTP 404" in summary["reason"]
    for shown in (json.dumps(summary), printed.out, printed.err):
        assert url not in shown
    assert summary["output"] == "krateo endpoint finops: /compute/out"


@pytest.mark.parametrize(
    ("server_url", "refusal"),
    [
        ("http://ann:hunter-2024@{host}", "must not contain credentials (user:password@)"),
        ("gopher://{host}/_secret-path", "must start with http:// or https://"),
    ],
    ids=["userinfo", "scheme"],
)
@pytest.mark.usefixtures("fake_model", "memory")
def test_krateo_server_url_with_credentials_or_another_scheme_is_refused(
    env: Path,
    capsys: pytest.CaptureFixture[str],
    server_url: str,
    refusal: str,
) -> None:
    with serve_at("127.0.0.1", finops) as (url, seen):
        value = server_url.format(host=url.removeprefix("http://"))
        secret(env, "finops", "server-url", value)
        code, summary = run(env, contract(input=krateo("/compute/in-input")))
    printed = capsys.readouterr()
    assert code == 2 and seen.requests == []
    assert "server-url" in summary["reason"] and refusal in summary["reason"]
    for shown in (json.dumps(summary), printed.out, printed.err):
        assert "hunter-2024" not in shown and "_secret-path" not in shown


@pytest.mark.usefixtures("memory")
def test_an_api_key_the_model_server_echoes_is_redacted_from_the_reason_and_log(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuses(method: str, path: str, headers: Mapping[str, str]) -> Answer:
        return 401, {}, {"error": f"invalid API key {headers.get('X-Api-Key')}"}

    secret(env, "model-key", "key", API_KEY)
    with serve_at("127.0.0.1", refuses) as (url, seen):
        auth = {"secretRef": {"name": "model-key", "key": "key"}, "header": "X-API-Key"}
        model = {"protocol": "kserve-v2", "url": url, "name": "m", "auth": auth}
        code, summary = run(env, contract(model=model, runner={"maxAttempts": 1}))
    printed = capsys.readouterr()
    assert code == 2 and seen.requests[0].headers["X-Api-Key"] == API_KEY
    assert "HTTP 401: invalid API key ***" in summary["reason"]
    for shown in (json.dumps(summary), printed.out, printed.err):
        assert API_KEY not in shown


def test_secret_values_are_redacted_in_every_form_they_take_in_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret_url = "postgresql+psycopg://app:p%40ss-w0rd@db:5432/prod"
    for key, value in [("url", secret_url + "\n"), ("short", "ab1")]:
        (tmp_path / "db").mkdir(exist_ok=True)
        (tmp_path / "db" / key).write_text(value)
    ctx = RunContext("uid", "job", {}, str(tmp_path))
    with redact.redacting():
        read_secret(ctx, name="db", key="url", field="urlSecretRef")
        read_secret(ctx, name="db", key="short", field="urlSecretRef")
        print(f"url={secret_url}", "password=p@ss-w0rd", "short=ab1")
        sys.stderr.write(f"split {secret_url[:12]}")
        sys.stderr.write(f"{secret_url[12:]} across writes\n")
    printed = capsys.readouterr()
    assert printed.out == "url=*** password=*** short=ab1\n"
    assert printed.err == "split *** across writes\n"
    assert redact.redact(secret_url) == secret_url  # outside an execution nothing is known
