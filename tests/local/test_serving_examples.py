"""Every example of testdata/examples/serving/, served on this machine as its header says.

Each test runs `longrun serve -f testdata/examples/serving/<runtime>.yaml` as a user would
(a subprocess, with the local overrides the example's header documents), checks that a
request without the API key gets 401 and one with it gets through, then runs a small
InferenceRun through the deployment with `longrun run` (its config's `model.deploymentRef`
names it) and judges the answers: every record written, the predictions the model must give.

Real: the `longrun` CLI, the controller's serving core rendering the pod, `longrun-fetch`
downloading from the source the example names (S3 through moto's server, HTTPS with a
private CA, Hugging Face through an `HF_ENDPOINT` on 127.0.0.1, a directory standing in for
a claim), the sha256 check, nginx checking the keys, the runtimes' servers from their cached
peer envs (e2e/peers), the runner. Stand-ins: the model files are small ones written here
(an iris ONNX graph, a sklearn iris classifier, the churn xgboost model of
testdata/serving-models/, a random 2-layer GGUF: its text is nonsense), and the
generic example's image runs as local/servers/onnx_v1.py. Skips locally when a peer env or
nginx is missing; fails in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e.peers import EnvBuildError, ensure_env
from e2e.peers.fixtures import skip_or_fail
from e2e.peers.stores import put_s3_object, serve_files, tls_files
from local.serve import main as serve_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "testdata" / "examples" / "serving"
PEERS = ROOT / "e2e" / "peers" / "servers"
# example -> (runtime, the e2e/peers env with its server)
RUNTIMES = {
    "llamacpp.yaml": ("llamacpp", "llama"),
    "kserve.yaml": ("kserve", "kserve"),
    "mlserver.yaml": ("mlserver", "mlserver"),
    "triton.yaml": ("triton", "triton"),
}
# (id, iris features, the class a nearest-centroid or logistic model gives)
IRIS = [
    ("1", [5.1, 3.5, 1.4, 0.2], 0),
    ("2", [5.9, 3.0, 4.2, 1.5], 1),
    ("3", [6.7, 3.0, 5.2, 2.3], 2),
]
# (id, [tenure_months, monthly_charges, support_calls, on_contract], churns)
CUSTOMERS = [
    ("a", [2, 95.0, 6, 0], True),
    ("b", [60, 30.0, 0, 1], False),
    ("c", [5, 110, 4, 0], True),
]


def served(test: Any) -> Any:
    """The marks of a test that starts real servers."""
    return pytest.mark.requires_service(pytest.mark.slow(test))


def env_python(name: str) -> str:
    try:
        return str(ensure_env(name).python)
    except EnvBuildError as exc:
        skip_or_fail(f"{name} env unavailable: {exc}")
        raise


@pytest.fixture
def nginx() -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        skip_or_fail("nginx is not installed (apt-get install nginx-light)")


def longrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "controller.cli", *args]


@contextmanager
def serving(
    example: str, work: Path, *flags: str, env: Mapping[str, str] | None = None
) -> Iterator[Any]:
    """`longrun serve -f <example> FLAGS` in a subprocess until it serves; yields its state.
    The runtime's Python is named: the env of the current pins, never an older one."""
    if example in RUNTIMES:
        runtime, peer_env = RUNTIMES[example]
        flags = (*flags, "--runtime-python", f"{runtime}={env_python(peer_env)}")
    proc = subprocess.Popen(
        longrun("serve", "-f", str(EXAMPLES / example), *flags, "--work-dir", str(work)),
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + 240
        found: list[Path] = []
        while not found and time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"longrun serve exited {proc.returncode}: {err[-3000:]}")
            found = list(work.glob("serving/*/*/serving.json"))
            time.sleep(0.2)
        assert found, "longrun serve did not start within 240 s"
        assert proc.stderr is not None
        said = proc.stderr.readline()
        if "running its generic command" in said:  # printed first (--allow-generic)
            said = proc.stderr.readline()
        assert ": Running, serving model" in said, said
        state = json.loads(found[0].read_text())
        state["key"] = Path(state["apiKeyFile"]).read_text().strip()
        yield state
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def status_of(url: str, body: object, key: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def keys_checked(state: Any, path: str, body: object) -> None:
    """401 without the key and with a wrong one, 200 with the one in the key file."""
    url = f"{state['endpoint']}{path}"
    assert status_of(url, body) == 401
    assert status_of(url, body, "lrk_wrong") == 401
    assert status_of(url, body, state["key"]) == 200


def run_through(tmp: Path, deployment: str, model: str, rows: list[dict[str, Any]]) -> Any:
    """`longrun run` of ROWS through the deployment served with --work-dir TMP/work; the
    answers by record id."""
    (tmp / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "run.yaml").write_text(f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {{name: through}}
spec:
  model:
    deploymentRef: {{name: {deployment}}}
{model}
  storage:
    input: {{file: {{path: {tmp / "in.jsonl"}, idField: id}}}}
    output: {{file: {{path: {tmp / "out"}}}}}
  runner: {{batchSize: 2, maxFailedRecords: 0}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata: {{name: through}}
spec: {{configRef: {{name: through}}, timeoutSeconds: 300}}
""")
    done = subprocess.run(
        longrun("run", "-f", str(tmp / "run.yaml"), "--work-dir", str(tmp / "work")),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting ModelDeployment" not in done.stderr  # the one `longrun serve` serves
    assert "InferenceRun default/through: Succeeded" in done.stderr
    count = len(rows)
    assert f"records: read={count} written={count} failed=0" in done.stderr
    lines = [
        line for f in sorted((tmp / "out").rglob("*.jsonl")) for line in f.read_text().splitlines()
    ]
    return {a["id"]: a["prediction"] for a in (json.loads(line) for line in lines if line.strip())}


def flat(value: Any) -> Any:
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value


def write_with(env: str, script: str, path: Path, *args: str) -> None:
    """Run a model writer of e2e/peers/servers in a peer env's Python."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([env_python(env), str(PEERS / script), str(path), *args], check=True)


def write_gguf(path: Path) -> None:
    """The tiny random llama of e2e/peers/servers/llama_server.py, in the llama env."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]); "
        "from llama_server import write_model; write_model(Path(sys.argv[1]), name='tiny')"
    )
    subprocess.run([env_python("llama"), "-c", code, str(path), str(PEERS)], check=True)


def iris_rows() -> list[dict[str, Any]]:
    return [{"id": rid, "x": features} for rid, features, _ in IRIS]


@served
def test_triton_example_serves_an_onnx_model_from_a_claim(tmp_path: Path, nginx: None) -> None:
    write_with("triton", "onnx_iris.py", tmp_path / "claim" / "vision" / "resnet50.onnx")
    pvc = f"model-store={tmp_path / 'claim'}"
    with serving("triton.yaml", tmp_path / "work", "--pvc", pvc) as state:
        assert state["protocol"] == "kserve-v2"
        tensor = {"name": "input", "shape": [1, 4], "datatype": "FP32", "data": IRIS[0][1]}
        keys_checked(state, "/v2/models/resnet50/infer", {"inputs": [tensor]})
        model = "    inputName: input\n    inputFields: [x]"
        answers = run_through(tmp_path, "resnet-triton", model, iris_rows())
    assert {rid: flat(answers[rid]["predict"]) for rid, _, _ in IRIS} == {r: c for r, _, c in IRIS}
    assert all(len(answers[rid]["scores"]) == 3 for rid, _, _ in IRIS)


@served
def test_generic_example_runs_its_image_as_a_local_server(tmp_path: Path, nginx: None) -> None:
    write_with("triton", "onnx_iris.py", tmp_path / "claim" / "iris" / "iris.onnx")
    command = f"{env_python('triton')} local/servers/onnx_v1.py"
    flags = ["--pvc", f"models={tmp_path / 'claim'}"]
    flags += ["--image-map", f"registry.example.com/ml/onnx-v1-server={command}"]
    flags += ["--allow-generic"]  # it runs a command on this machine (local/generic.py)
    with serving("generic.yaml", tmp_path / "work", *flags) as state:
        assert state["protocol"] == "kserve-v1"
        keys_checked(state, "/v1/models/iris:predict", {"instances": [IRIS[0][1]]})
        answers = run_through(tmp_path, "iris-generic", "    inputFields: [x]", iris_rows())
    assert {rid: answers[rid]["predict"] for rid, _, _ in IRIS} == {r: c for r, _, c in IRIS}


@served
def test_mlserver_example_downloads_over_https_and_checks_the_sha256(
    tmp_path: Path, nginx: None
) -> None:
    env_python("mlserver")
    model = (ROOT / "testdata" / "serving-models" / "churn-xgboost.json").read_bytes()
    tls = tls_files(tmp_path / "pki")
    with serve_files({"/churn/model.json": model}, tls=tls) as base:
        flags = ["--model-source", f"{base}/churn/model.json"]
        ca = {"REQUESTS_CA_BUNDLE": str(tls.ca_bundle)}
        with serving("mlserver.yaml", tmp_path / "work", *flags, env=ca) as state:
            tensor = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": CUSTOMERS[0][1]}
            keys_checked(state, "/v2/models/churn-mlserver/infer", {"inputs": [tensor]})
            rows = [{"id": cid, "x": features} for cid, features, _ in CUSTOMERS]
            model_yaml = "    inputDatatype: FP32\n    inputFields: [x]"
            answers = run_through(tmp_path, "churn-mlserver", model_yaml, rows)
    for cid, _, churns in CUSTOMERS:
        probability = flat(answers[cid])  # the one output, `predict`: [p]
        assert 0.0 <= probability <= 1.0
        assert (probability > 0.5) == churns, (cid, probability)


def test_mlserver_example_refuses_a_model_whose_sha256_differs(tmp_path: Path) -> None:
    with serve_files({"/churn/model.json": b"{}"}) as base:
        flags = ["--model-source", f"{base}/churn/model.json", "--work-dir", str(tmp_path)]
        done = subprocess.run(
            longrun("serve", "-f", str(EXAMPLES / "mlserver.yaml"), *flags),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    assert done.returncode == 1
    assert "downloading the model failed (exit code 3)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("example", "flags", "said"),
    [
        ("generic.yaml", [], "--image-map registry.example.com/ml/onnx-v1-server=COMMAND"),
        ("triton.yaml", ["--image-map", "a=b"], "--image-map: only a generic runtime"),
        ("kserve.yaml", [], "--env-file minio-credentials=PATH"),
        ("triton-grpc", [], "protocol: grpc is served in a cluster only"),
    ],
)
def test_serve_says_in_one_line_what_an_example_needs_here(
    example: str, flags: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = EXAMPLES / example
    if example == "triton-grpc":
        path = tmp_path / "grpc.yaml"
        text = (EXAMPLES / "triton.yaml").read_text()
        path.write_text(text.replace("protocol: http", "protocol: grpc"))
    code = serve_main(["-f", str(path), *flags, "--work-dir", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2
    assert said in err
    assert len(err.strip().splitlines()) == 1, err


@served
def test_kserve_example_downloads_from_s3_with_the_credentials_secret(
    tmp_path: Path, nginx: None, moto_endpoint: str
) -> None:
    write_with("kserve", "iris_sklearn.py", tmp_path / "model.joblib")
    put_s3_object(
        moto_endpoint, "models", "iris/model.joblib", (tmp_path / "model.joblib").read_bytes()
    )
    (tmp_path / "minio.env").write_text("AWS_ACCESS_KEY_ID=testing\nAWS_SECRET_ACCESS_KEY=x\n")
    flags = ["--model-endpoint-url", moto_endpoint]
    flags += ["--env-file", f"minio-credentials={tmp_path / 'minio.env'}"]
    region = {"AWS_DEFAULT_REGION": "us-east-1"}
    with serving("kserve.yaml", tmp_path / "work", *flags, env=region) as state:
        assert state["protocol"] == "kserve-v1"
        keys_checked(state, "/v1/models/sklearn-iris:predict", {"instances": [IRIS[0][1]]})
        answers = run_through(tmp_path, "iris-kserve", "    inputFields: [x]", iris_rows())
    assert {rid: flat(answers[rid]) for rid, _, _ in IRIS} == {r: c for r, _, c in IRIS}


@served
def test_llamacpp_example_downloads_from_hugging_face_and_checks_keys_itself(
    tmp_path: Path,
) -> None:
    write_gguf(tmp_path / "tiny.gguf")
    path = "/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/qwen2.5-0.5b-instruct-q4_k_m.gguf"
    with (
        serve_files({path: (tmp_path / "tiny.gguf").read_bytes()}) as hub,
        serving("llamacpp.yaml", tmp_path / "work", "qwen-chat", env={"HF_ENDPOINT": hub}) as state,
    ):
        assert state["protocol"] == "openai-chat"
        body = {
            "model": "qwen2.5-0.5b-instruct",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
        }
        keys_checked(state, "/v1/chat/completions", body)
        rows = [{"id": str(i), "prompt": f"say {i}"} for i in range(4)]
        model = "    promptField: prompt\n    maxTokens: 4"
        answers = run_through(tmp_path, "qwen-chat", model, rows)
    assert sorted(answers) == ["0", "1", "2", "3"]
    assert all(isinstance(a, str) for a in answers.values())  # the text: nonsense here


# -- the examples and their documentation ------------------------------------------------------


def test_every_serving_example_has_a_test_here() -> None:
    tested = set(re.findall(r'serving\(\s*"(\w+)\.yaml"', Path(__file__).read_text()))
    assert {p.stem for p in EXAMPLES.glob("*.yaml")} == tested


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_each_example_and_the_docs_give_its_local_command(example: str) -> None:
    command = f"longrun serve -f testdata/examples/serving/{example}"
    assert command in (EXAMPLES / example).read_text()
    assert command in (ROOT / "docs" / "serving.md").read_text()
