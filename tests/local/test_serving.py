"""ModelDeployments served on this machine, end to end: `longrun serve` starts the real server of
the runtime (KServe's Python server behind the nginx key check; llama.cpp through
llama-cpp-python, which checks the key itself), a request without the key gets 401, and
`longrun run` of a config whose `model.deploymentRef` names the deployment succeeds, through
a deployment another command serves, or one it starts for the run and stops afterwards.

Real: the `longrun` CLI in subprocesses, the controller's serving core rendering the pod,
`longrun-fetch`, the local executor, KServe and llama-cpp-python from their cached peer
envs (e2e/peers), nginx, the runner. Faked: nothing; the GGUF model is a tiny random one.
Skips locally when a peer env or nginx is missing; fails in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e.peers import EnvBuildError, ensure_env
from e2e.peers.fixtures import skip_or_fail

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]
ROOT = Path(__file__).resolve().parents[2]
IRIS_ROWS = [
    {"id": "1", "f": [5.1, 3.5, 1.4, 0.2]},
    {"id": "2", "f": [6.7, 3.0, 5.2, 2.3]},
    {"id": "3", "f": [5.9, 3.0, 4.2, 1.5]},
]


def env_python(name: str) -> str:
    try:
        return str(ensure_env(name).python)
    except EnvBuildError as exc:
        skip_or_fail(f"{name} env unavailable: {exc}")
        raise


def longrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "controller.cli", *args]


def write_iris_model(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys, joblib; from sklearn.datasets import load_iris; "
        "from sklearn.linear_model import LogisticRegression; X, y = load_iris(return_X_y=True); "
        "joblib.dump(LogisticRegression(max_iter=1000).fit(X, y), sys.argv[1])"
    )
    subprocess.run([env_python("kserve"), "-c", code, str(path)], check=True)


def write_tiny_gguf(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]); "
        "from llama_server import write_model; write_model(Path(sys.argv[1]), name='tiny')"
    )
    servers = str(ROOT / "e2e" / "peers" / "servers")
    subprocess.run([env_python("llama"), "-c", code, str(path), servers], check=True)


def deployment_yaml(name: str, source: str, fmt: str, runtime: str) -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: {name}
spec:
  model:
    source: {source}
    format: {fmt}
  runtime:
    {runtime}
"""


def run_yaml(name: str, deployment: str, model: str, tmp: Path) -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata:
  name: {name}
spec:
  model:
    deploymentRef:
      name: {deployment}
{model}
  storage:
    input:
      file:
        path: {tmp / "in.jsonl"}
        idField: id
    output:
      file:
        path: {tmp / "out"}
  runner:
    batchSize: 2
    maxFailedRecords: 0
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata:
  name: {name}
spec:
  configRef:
    name: {name}
  timeoutSeconds: 300
"""


@pytest.fixture
def nginx() -> None:
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        skip_or_fail("nginx is not installed (apt-get install nginx-light)")


@contextmanager
def serving(args: list[str], work: Path) -> Iterator[dict[str, str]]:
    """`longrun serve ARGS` in a subprocess until it serves; yields its serving.json."""
    proc = subprocess.Popen(
        longrun("serve", *args, "--work-dir", str(work)),
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        found: list[Path] = []
        while not found and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            found = list(work.glob("serving/*/*/serving.json"))
            time.sleep(0.2)
        assert found, "longrun serve did not start within 120 s"
        assert proc.stderr is not None
        said = proc.stderr.readline()
        assert ": Running, serving model" in said, said
        yield json.loads(found[0].read_text())
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def status_of(url: str, body: dict[str, object], key: str | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def run(files: Path, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        longrun("run", "-f", str(files), "--work-dir", str(work), *extra),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )


def answers(out: Path) -> list[dict[str, object]]:
    lines = [line for f in sorted(out.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    return [json.loads(line) for line in lines if line.strip()]


def test_kserve_deployment_checks_keys_and_serves_a_run(tmp_path: Path, nginx: None) -> None:
    write_iris_model(tmp_path / "claims" / "models" / "iris" / "model.joblib")
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": r["id"], "x": r["f"]}) + "\n" for r in IRIS_ROWS)
    )
    mdep = tmp_path / "mdep"
    mdep.mkdir()
    runtime = "kserve: {protocol: v1}"
    (mdep / "iris.yaml").write_text(
        deployment_yaml("iris", "pvc://models/iris/model.joblib", "sklearn", runtime)
    )
    (tmp_path / "run.yaml").write_text(
        run_yaml("classify", "iris", "    inputFields: [x]", tmp_path)
    )
    work = tmp_path / "work"
    pvc = f"models={tmp_path / 'claims' / 'models'}"
    with serving(["-f", str(mdep), "--pvc", pvc], work) as state:
        url = f"{state['endpoint']}/v1/models/iris:predict"
        key = Path(state["apiKeyFile"]).read_text().strip()
        body = {"instances": [IRIS_ROWS[1]["f"]]}
        assert status_of(url, body) == 401
        assert status_of(url, body, "lrk_wrong") == 401
        assert status_of(url, body, key.swapcase()) == 401  # keys compare exactly (issue 26)
        assert status_of(url, body, key) == 200
        done = run(tmp_path / "run.yaml", work)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "InferenceRun default/classify: Succeeded" in done.stderr
        assert len(answers(tmp_path / "out")) == 3


def llama_files(tmp_path: Path) -> Path:
    """A tiny GGUF on a claim, 5 prompts, the deployment and a chat run using it."""
    write_tiny_gguf(tmp_path / "claims" / "models" / "tiny.gguf")
    prompts = "".join(json.dumps({"id": str(i), "prompt": f"say {i}"}) + "\n" for i in range(5))
    (tmp_path / "in.jsonl").write_text(prompts)
    files = tmp_path / "files"
    files.mkdir()
    runtime = "llamacpp: {contextSize: 512}"
    (files / "mdep.yaml").write_text(
        deployment_yaml("tiny-chat", "pvc://models/tiny.gguf", "gguf", runtime)
    )
    (files / "run.yaml").write_text(run_yaml("chat", "tiny-chat", "    maxTokens: 4", tmp_path))
    return files


def test_llamacpp_deployment_checks_keys_itself_and_serves_a_run(tmp_path: Path) -> None:
    files = llama_files(tmp_path)
    work = tmp_path / "work"
    pvc = f"models={tmp_path / 'claims' / 'models'}"
    with serving(["-f", str(files / "mdep.yaml"), "--pvc", pvc], work) as state:
        url = f"{state['endpoint']}/v1/chat/completions"
        key = Path(state["apiKeyFile"]).read_text().strip()
        body = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}]}
        assert status_of(url, {**body, "max_tokens": 2}) == 401
        assert status_of(url, {**body, "max_tokens": 2}, key.swapcase()) == 401  # exact, too
        assert status_of(url, {**body, "max_tokens": 2}, key) == 200
        done = run(files / "run.yaml", work)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "starting ModelDeployment" not in done.stderr  # it used the one served
        assert "InferenceRun default/chat: Succeeded" in done.stderr
        assert len(answers(tmp_path / "out")) == 5


def test_a_deployment_in_the_files_is_started_for_the_run_and_stopped_after(
    tmp_path: Path,
) -> None:
    files = llama_files(tmp_path)
    work = tmp_path / "work"
    done = run(files, work, "--pvc", f"models={tmp_path / 'claims' / 'models'}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting ModelDeployment default/tiny-chat for this run" in done.stderr
    assert "InferenceRun default/chat: Succeeded" in done.stderr
    assert len(answers(tmp_path / "out")) == 5
    assert not list(work.glob("serving/*/*/serving.json"))


def test_mlserver_deployment_answers_v2_behind_the_key_check(tmp_path: Path, nginx: None) -> None:
    env_python("mlserver")
    write_iris_model(tmp_path / "claims" / "models" / "iris" / "model.joblib")
    (tmp_path / "mdep.yaml").write_text(
        deployment_yaml("iris-ml", "pvc://models/iris/model.joblib", "sklearn", "mlserver: {}")
    )
    pvc = f"models={tmp_path / 'claims' / 'models'}"
    with serving(["-f", str(tmp_path / "mdep.yaml"), "--pvc", pvc], tmp_path / "work") as state:
        url = f"{state['endpoint']}/v2/models/iris-ml/infer"
        key = Path(state["apiKeyFile"]).read_text().strip()
        tensor = {"name": "x", "shape": [1, 4], "datatype": "FP32", "data": IRIS_ROWS[1]["f"]}
        body = {"inputs": [tensor]}
        assert status_of(url, body) == 401
        assert status_of(url, body, key) == 200
