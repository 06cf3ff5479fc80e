"""A `generic` ModelDeployment on this machine (issue 26, finding 9): `longrun serve` and
`longrun run` run its command only with `--allow-generic`, print it first, and give it the
deployment's environment, not the user's.

Real: the `longrun` CLI in subprocesses (`python -m controller.cli`), the controller's serving
core rendering the pod, the local executor, the runner, and a generic server: a stdlib Python
script (written by the test) that records the environment it got and answers KServe v1.
Faked: nothing. The user's environment holds a marker secret that must not reach the server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET = "LONGRUN_TEST_USER_TOKEN"
SERVER = """\
import http.server, json, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
with open(os.environ["ENV_DUMP"], "w") as out:
    json.dump(dict(os.environ), out)
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def do_POST(self):
        rows = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["instances"]
        body = json.dumps({"predictions": [len(r) for r in rows]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def files(tmp: Path) -> Path:
    """A generic deployment (no keys, its model on a claim), and a run that uses it."""
    (tmp / "claim").mkdir()
    (tmp / "claim" / "m.onnx").write_bytes(b"onnx")
    (tmp / "server.py").write_text(SERVER)
    (tmp / "in.jsonl").write_text('{"id": "1", "x": [1, 2, 3]}\n{"id": "2", "x": [4, 5, 6]}\n')
    folder = tmp / "files"
    folder.mkdir()
    (folder / "all.yaml").write_text(f"""\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: own-server
spec:
  model:
    source: pvc://models/m.onnx
    format: onnx
  servedName: m
  auth:
    enabled: false
  env:
    - {{name: ENV_DUMP, value: "{tmp / "env.json"}"}}
    - {{name: GREETING, value: hello}}
  runtime:
    generic:
      image: registry.example.com/own-server:1.0
      command: ["python3", "{tmp / "server.py"}"]
      args: ["--port", "8000"]
      port: 8000
      protocol: kserve-v1
      healthPath: /healthz
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata:
  name: score
spec:
  model:
    deploymentRef:
      name: own-server
    inputFields: [x]
  storage:
    input:
      file:
        path: {tmp / "in.jsonl"}
        idField: id
    output:
      file:
        path: {tmp / "out"}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata:
  name: score
spec:
  configRef:
    name: score
  timeoutSeconds: 120
""")
    return folder


def longrun(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller.cli", *args, "--work-dir", str(tmp / "work")],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, SECRET: "hunter2", "PYTHONWARNINGS": ""},
    )


def test_serve_refuses_a_generic_deployment_unless_allowed(tmp_path: Path) -> None:
    folder = files(tmp_path)
    done = longrun(tmp_path, "serve", "-f", str(folder), "--pvc", f"models={tmp_path / 'claim'}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("longrun serve: ModelDeployment default/own-server: runtime generic")
    assert f"python3 {tmp_path / 'server.py'} --port 8000" in line
    assert "only with --allow-generic" in line
    assert not (tmp_path / "env.json").exists()  # nothing ran


def test_run_refuses_to_start_a_generic_deployment_unless_allowed(tmp_path: Path) -> None:
    folder = files(tmp_path)
    done = longrun(tmp_path, "run", "-f", str(folder), "--pvc", f"models={tmp_path / 'claim'}")
    assert done.returncode == 2, done.stderr
    assert "longrun run: ModelDeployment default/own-server: runtime generic" in done.stderr
    assert "only with --allow-generic" in done.stderr
    assert not (tmp_path / "env.json").exists() and not (tmp_path / "out").exists()


def test_an_allowed_generic_run_shows_its_command_first_and_gets_only_its_own_env(
    tmp_path: Path,
) -> None:
    folder = files(tmp_path)
    claim = f"models={tmp_path / 'claim'}"
    done = longrun(tmp_path, "run", "-f", str(folder), "--pvc", claim, "--allow-generic")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    shown = next(i for i, line in enumerate(lines) if "running its generic command" in line)
    assert lines[shown].startswith("longrun: ModelDeployment default/own-server: running its")
    assert f"python3 {tmp_path / 'server.py'} --port " in lines[shown]
    assert "GREETING" in lines[shown] and SECRET not in lines[shown]
    assert shown < next(i for i, line in enumerate(lines) if "serves at" in line)
    env = json.loads((tmp_path / "env.json").read_text())
    assert SECRET not in env  # the user's environment stays out
    assert env["GREETING"] == "hello" and env["MODEL_NAME"] == "m"
    assert env["MODEL_PATH"] == str((tmp_path / "claim" / "m.onnx").resolve())
    assert env["PATH"] == os.environ["PATH"]  # what starting a program needs
    allowed = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR"}
    own = {"ENV_DUMP", "GREETING", "MODEL_NAME", "MODEL_PATH", "TERMINATION_MESSAGE_PATH"}
    assert set(env) - own - allowed <= {"PWD", "SHLVL", "_", "LC_CTYPE"}, set(env) - own - allowed
    assert "InferenceRun default/score: Succeeded" in done.stderr


def test_serve_with_allow_generic_prints_the_command_before_serving(tmp_path: Path) -> None:
    folder = files(tmp_path)
    work = tmp_path / "work"
    argv = [sys.executable, "-m", "controller.cli", "serve", "-f", str(folder), "--allow-generic"]
    argv += ["--pvc", f"models={tmp_path / 'claim'}", "--work-dir", str(work)]
    env = {**os.environ, SECRET: "hunter2", "PYTHONWARNINGS": ""}
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "running its generic command on this machine (--allow-generic): python3" in first
        assert ": Running, serving model 'm'" in proc.stderr.readline()
        deadline = time.monotonic() + 30
        while not (tmp_path / "env.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert SECRET not in json.loads((tmp_path / "env.json").read_text())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
