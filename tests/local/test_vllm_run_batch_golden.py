"""Golden test: one OpenAI batch file through `longrun run` and through vLLM's own `vllm run-batch`.

Both runners get the same lines (chat with per-request parameters, an embeddings line, bodies
the server refuses) and the same model (the vllm peer env's tiny llama, with the same engine
settings: e2e/peers/servers/vllm_run_batch.py reuses vllm_server.py's). Their outputs must agree
line for line, matched by `custom_id`: the same ids, the same top-level keys, the same
`response.status_code`, the same keys in each answer's body, and the same error object where
both refuse a line. The generated text may differ (and does not matter: random weights).
Where the two differ on purpose, the test says so explicitly (docs/llm-batch.md, "Compared
with vllm run-batch"): run-batch writes one file with the error object in `error` and no body,
longrun writes an output and an error output, keeps the server's answer in `response.body` and
always says why in `error {code, message}`; run-batch refuses `/v1/completions` lines and with
them the whole file, longrun answers them.

Real: the `longrun` command as a subprocess (rendering, the Secret it mounts, the runner),
vLLM's CPU build serving the tiny llama behind its API key (the `vllm_server` fixture), and
`vllm run-batch` of the same vLLM in the same env, run once for the module (it loads the
model itself: 1-3 minutes, ~3 GB; it runs before the session's vLLM server starts when this
module is the first to ask for one). Faked: nothing; the model's weights are random. Skips
without the vllm env; fails in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.peers.envs import EnvBuildError, ensure_env
from e2e.peers.fixtures import skip_or_fail
from e2e.peers.server import PeerServer
from e2e.peers.specs import SERVERS_DIR
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]

BIN = Path(sys.executable).parent
MODEL = "tiny-llama"  # what both serve (--served-model-name)
Line = dict[str, Any]


def chat(custom_id: str, **body: Any) -> Line:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
TURNS = [
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": "And 3 + 3?"},
]
# The lines both runners take: answered ones, then ones the model or server refuses.
LINES = [
    chat("hello", model=MODEL, messages=HELLO, max_tokens=8, temperature=0),
    chat("turns", model=MODEL, messages=TURNS, max_tokens=6, temperature=0.5, seed=7, top_p=0.9),
    chat("two-choices", model=MODEL, messages=HELLO, max_tokens=4, n=2, stop=["\n"]),
    chat("logprobs", model=MODEL, messages=HELLO, max_tokens=3, logprobs=True, top_logprobs=2),
    chat("no-model", messages=HELLO, max_tokens=5, temperature=0),
    # max_tokens far over --max-model-len 256: vLLM refuses the body with a 400.
    chat("too-many-tokens", model=MODEL, messages=HELLO, max_tokens=4096),
    # a prompt longer than the context: the same, for the messages.
    chat(
        "too-long", model=MODEL, messages=[{"role": "user", "content": "word " * 400}], max_tokens=4
    ),
    # OpenAI takes POST only: longrun refuses the line, run-batch runs it as if it were a POST.
    {**chat("get", model=MODEL, messages=HELLO, max_tokens=2), "method": "GET"},
    # the generating model serves no embeddings (vLLM's pooling runner does): both refuse it.
    {
        "custom_id": "embed",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": MODEL, "input": "hello"},
    },
]
ANSWERED = ["hello", "turns", "two-choices", "logprobs", "no-model"]  # by both
REFUSED = ["too-many-tokens", "too-long"]
# What run-batch refuses and with it the whole file (vLLM 0.32), and longrun answers.
COMPLETIONS = {
    "custom_id": "complete",
    "method": "POST",
    "url": "/v1/completions",
    "body": {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 4},
}


def write_lines(path: Path, lines: list[Line]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def vllm_python() -> str:
    try:
        return str(ensure_env("vllm").python)
    except EnvBuildError as exc:
        skip_or_fail(f"vllm env unavailable: {exc}")


def in_vllm_env(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`<vllm env python> ARGS`, with the env's own path only (none of the project's)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [vllm_python(), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def run_batch_lines() -> Iterator[dict[str, Line]]:
    """vLLM's `run-batch` output for LINES, by custom_id (session-scoped: ask for it before
    `vllm_server`, so that the two vLLM engines do not run at once)."""
    with tempfile.TemporaryDirectory(prefix="longrun-run-batch-") as name:
        tmp = Path(name)
        source = write_lines(tmp / "in.jsonl", LINES)
        script = str(SERVERS_DIR / "vllm_run_batch.py")
        io = ("-i", str(source), "-o", str(tmp / "out.jsonl"))
        done = in_vllm_env(script, *io, "--workdir", str(tmp), cwd=tmp, timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        lines = [json.loads(line) for line in (tmp / "out.jsonl").read_text().splitlines()]
        yield {line["custom_id"]: line for line in lines}


def batch_run(server: PeerServer, data: Path) -> list[dict[str, Any]]:
    """A Secret with the server's key, a config reading data/in.jsonl as a batch file, a run."""
    assert server.api_key is not None
    file_input = {"path": str(data / "in.jsonl"), "format": "openai-batch"}
    spec = {
        "model": {
            "protocol": "openai-chat",
            "url": f"{server.http_url}/v1",
            "name": server.model,
            "auth": {"secretRef": {"name": "llm-key", "key": "key"}},
        },
        "storage": {"input": {"file": file_input}, "output": {"file": {"path": str(data / "out")}}},
        "runner": {"batchSize": 2, "concurrency": 4, "maxFailedRecords": 10},
    }
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "llm-key"}}
        | {"stringData": {"key": server.api_key}},
        {"apiVersion": "longrun.dev/v1alpha1", "kind": "InferenceConfig"}
        | {"metadata": {"name": "golden"}, "spec": spec},
        {"apiVersion": "longrun.dev/v1alpha1", "kind": "InferenceRun"}
        | {"metadata": {"name": "golden-once"}, "spec": {"configRef": {"name": "golden"}}},
    ]


def part_lines(directory: Path) -> list[Line]:
    return [
        json.loads(line)
        for part in sorted(directory.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def longrun_lines(
    run_batch_lines: dict[str, Line],  # first: vLLM's own run ends before the server starts
    vllm_server: PeerServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[str, Line]]:
    """`longrun run` of LINES and COMPLETIONS: by custom_id, ("output" or "errors", line)."""
    tmp = tmp_path_factory.mktemp("golden")
    data = tmp / "data"
    data.mkdir()
    write_lines(data / "in.jsonl", [*LINES, COMPLETIONS])
    manifest = tmp / "golden.yaml"
    manifest.write_text(yaml.safe_dump_all(batch_run(vllm_server, data)))
    done = subprocess.run(
        [str(BIN / "longrun"), "run", "-f", str(manifest), "--work-dir", str(tmp / "w")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found = {line["custom_id"]: ("output", line) for line in part_lines(data / "out")}
    found |= {line["custom_id"]: ("errors", line) for line in part_lines(data / "out-errors")}
    return found


def keys(value: Any) -> set[str]:
    assert isinstance(value, dict), value
    return set(value)


def test_both_write_one_line_per_custom_id_with_openais_top_level_keys(
    run_batch_lines: dict[str, Line], longrun_lines: dict[str, tuple[str, Line]]
) -> None:
    assert set(run_batch_lines) == {line["custom_id"] for line in LINES}
    assert set(longrun_lines) == set(run_batch_lines) | {COMPLETIONS["custom_id"]}
    for custom_id, theirs in run_batch_lines.items():
        _, ours = longrun_lines[custom_id]
        assert list(ours) == list(theirs) == ["id", "custom_id", "response", "error"], custom_id
        assert ours["id"].startswith("batch_req_") and theirs["id"].startswith("vllm-")


def test_answered_lines_have_the_same_status_and_body_shape(
    run_batch_lines: dict[str, Line], longrun_lines: dict[str, tuple[str, Line]]
) -> None:
    for custom_id in ANSWERED:
        theirs = run_batch_lines[custom_id]
        where, ours = longrun_lines[custom_id]
        assert where == "output" and ours["error"] is None and theirs["error"] is None
        assert keys(ours["response"]) == keys(theirs["response"])
        assert ours["response"]["status_code"] == theirs["response"]["status_code"] == 200
        body, their_body = ours["response"]["body"], theirs["response"]["body"]
        assert keys(body) == keys(their_body), custom_id
        assert body["object"] == their_body["object"] == "chat.completion"
        assert body["model"] == their_body["model"] == MODEL
        assert keys(body["usage"]) == keys(their_body["usage"])
        assert len(body["choices"]) == len(their_body["choices"]), custom_id
        for choice, their_choice in zip(body["choices"], their_body["choices"], strict=True):
            assert keys(choice) == keys(their_choice), custom_id
            assert keys(choice["message"]) == keys(their_choice["message"])
            assert (choice["logprobs"] is None) == (their_choice["logprobs"] is None)
    two = longrun_lines["two-choices"][1]["response"]["body"]["choices"]
    assert len(two) == 2  # the per-request parameters went through (n=2)
    logprobs = longrun_lines["logprobs"][1]["response"]["body"]["choices"][0]["logprobs"]
    assert len(logprobs["content"][0]["top_logprobs"]) == 2


def test_a_body_the_server_refuses_gets_the_same_status_and_error_object_nested_differently(
    run_batch_lines: dict[str, Line], longrun_lines: dict[str, tuple[str, Line]]
) -> None:
    for custom_id in REFUSED:
        theirs = run_batch_lines[custom_id]
        where, ours = longrun_lines[custom_id]
        assert where == "errors", custom_id
        assert ours["response"]["status_code"] == theirs["response"]["status_code"] == 400
        # vLLM's error object ({"error": {"message", "type", "param", "code"}}): run-batch puts
        # it in `error` and leaves the body null; longrun keeps it as the response body, as
        # OpenAI's error lines do, and says why in its own `error`.
        server_error = ours["response"]["body"]
        assert theirs["response"]["body"] is None
        assert keys(server_error) == keys(theirs["error"]) == {"error"}
        assert keys(server_error["error"]) == keys(theirs["error"]["error"])
        assert server_error["error"]["code"] == theirs["error"]["error"]["code"] == 400
        assert keys(ours["error"]) == {"code", "message"}
        assert ours["error"]["code"] == "invalid_request"
        said = server_error["error"]["message"]
        assert said == theirs["error"]["error"]["message"]  # the same refusal, word for word
        assert ours["error"]["message"].startswith(
            f"custom_id '{custom_id}': HTTP 400: {said[:60]}"
        )


def test_an_embeddings_line_on_a_generating_model_fails_in_both(
    run_batch_lines: dict[str, Line], longrun_lines: dict[str, tuple[str, Line]]
) -> None:
    theirs = run_batch_lines["embed"]
    where, ours = longrun_lines["embed"]
    assert where == "errors"
    # run-batch answers it itself: a 400 with its message as a bare string, no body.
    assert theirs["response"]["status_code"] == 400 and theirs["response"]["body"] is None
    assert theirs["error"] == "Model does not support endpoint: /v1/embeddings"
    # vLLM's server has no such route for a generating model: the line fails as not found,
    # with the server's answer kept.
    assert ours["response"]["status_code"] == 404
    assert ours["response"]["body"] == {"detail": "Not Found"}
    assert ours["error"] == {
        "code": "not_found",
        "message": "custom_id 'embed': HTTP 404: Not Found",
    }


def test_a_get_line_run_batch_answers_is_refused_by_longrun(
    run_batch_lines: dict[str, Line], longrun_lines: dict[str, tuple[str, Line]]
) -> None:
    theirs = run_batch_lines["get"]
    where, ours = longrun_lines["get"]
    assert theirs["response"]["status_code"] == 200 and theirs["error"] is None  # sent as a POST
    assert where == "errors" and ours["response"] is None
    assert ours["error"]["code"] == "invalid_method"


def test_a_completions_line_longrun_answers_is_refused_by_run_batch(
    longrun_lines: dict[str, tuple[str, Line]], tmp_path: Path
) -> None:
    where, ours = longrun_lines["complete"]
    assert where == "output" and ours["response"]["status_code"] == 200
    assert ours["response"]["body"]["object"] == "text_completion"
    # run-batch reads each line into its BatchRequestInput before running it; a completions
    # body is none of the bodies it knows, so the line raises and the whole run stops.
    check = (
        "import sys\n"
        "from pydantic import ValidationError\n"
        "from vllm.entrypoints.launchers.run_batch import BatchRequestInput\n"
        "try:\n"
        "    BatchRequestInput.model_validate_json(sys.argv[1])\n"
        "except ValidationError:\n"
        "    print('refused')\n"
    )
    done = in_vllm_env("-c", check, json.dumps(COMPLETIONS), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip() == "refused"
