"""vLLM's embeddings task locally: `longrun run` of a config whose `model.deploymentRef` names a
`vllm` deployment in the same files starts it (task embeddings: vLLM's pooling runner),
sends the run's texts through the OpenAI embeddings protocol behind the key-checking sidecar,
writes one vector per record, and stops the server afterwards. (Chat is the vllm.yaml example's
test, completions the real control plane's: tests/local/test_serving_examples.py,
tests/e2e/test_serving_real.py.)

Real: the `longrun` CLI in a subprocess, the controller's serving core, vLLM's CPU build from
the vllm peer env serving its tiny llama (a Hugging Face directory standing in for a claim),
nginx, the runner. Faked: nothing; the vectors are those of random weights. Skips without the
vllm env or nginx; fails in CI.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.local.test_serving_examples import env_python, longrun, nginx, served

__all__ = ["nginx"]  # the fixture: nginx runs the key-checking sidecar

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = 128  # the tiny llama's hidden size: its embeddings' length


@served
@pytest.mark.usefixtures("nginx")
def test_a_vllm_embeddings_deployment_started_for_a_run_returns_one_vector_per_record(
    tmp_path: Path,
) -> None:
    models = Path(env_python("vllm")).parents[1] / "models"
    texts = [{"id": str(i), "text": f"ticket number {i}"} for i in range(5)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts))
    (tmp_path / "run.yaml").write_text(f"""\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata: {{name: tiny-embed}}
spec:
  model: {{source: "pvc://models/tiny-llama", format: hf, task: embeddings}}
  runtime: {{vllm: {{maxModelLen: 256, dtype: float32}}}}
  startupTimeoutSeconds: 1200
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {{name: embed}}
spec:
  model:
    deploymentRef: {{name: tiny-embed}}
    promptField: text
  storage:
    input: {{file: {{path: {tmp_path / "in.jsonl"}, idField: id}}}}
    output: {{file: {{path: {tmp_path / "out"}}}}}
  runner: {{batchSize: 2, maxFailedRecords: 0}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata: {{name: embed}}
spec: {{configRef: {{name: embed}}, timeoutSeconds: 1500}}
""")
    command = longrun("run", "-f", str(tmp_path / "run.yaml"), "--work-dir", str(tmp_path / "w"))
    command += ["--pvc", f"models={models}", "--runtime-python", f"vllm={env_python('vllm')}"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert "starting ModelDeployment default/tiny-embed" in done.stderr
    assert "records: read=5 written=5 failed=0" in done.stderr
    lines = [
        json.loads(line)
        for f in sorted((tmp_path / "out").rglob("*.jsonl"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]
    vectors = {a["id"]: a["prediction"] for a in lines}
    assert sorted(vectors) == [t["id"] for t in texts]
    assert all(len(v) == HIDDEN and all(math.isfinite(x) for x in v) for v in vectors.values())
    assert vectors["0"] != vectors["1"]  # the text, not a constant
    assert not (tmp_path / "w" / "serving" / "default" / "tiny-embed" / "serving.json").exists()
