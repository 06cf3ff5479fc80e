"""Serving on this machine: start-up, the auth sidecar's cost, and a run against an idle deployment.

Three numbers (issue 21), measured with the real servers of e2e/peers, locally:

1. **creation to Available**: `LocalDeployment.start()` (what `longrun serve` runs: render the
   pod, run longrun-fetch, start the server, and nginx for KServe, and wait until the health
   path answers through the key check), for a KServe sklearn deployment and a llama.cpp one;
2. **through the deployment ÷ direct**: the same `longrun run` (the real runner: JSONL in,
   KServe v1 with batches of 256 and 8 requests in flight, JSONL out) once through the
   deployment's endpoint (its `model.deploymentRef`: the nginx sidecar checks the key on every
   request) and once straight to the KServe server's own port (a `url`, no key), interleaved
   A B B A ... in the same run of this script; records/s from the runner's own
   `durationSeconds`; target ≥ 0.95;
3. **time to first record against an idle deployment**: `longrun run` of a config whose
   deployment is not served: the command starts it for the run (locally, "idle" means no
   server process), and the clock stops when the first output record is on disk.

    python bench/serving.py                       # ~1-2 minutes with the peer envs built
    python bench/serving.py --records 50000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from controller.core.serving.settings import local_serving_settings  # noqa: E402
from e2e.peers import ensure_env  # noqa: E402
from local.deployment import LocalDeployment, local_deployment  # noqa: E402
from local.inputs import load_inputs  # noqa: E402

IRIS = ([5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5])
KSERVE = """\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata: {name: iris}
spec:
  model: {source: "pvc://models/iris/model.joblib", format: sklearn}
  runtime: {kserve: {protocol: v1}}
"""
LLAMA = """\
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata: {name: tiny-chat}
spec:
  model: {source: "pvc://models/tiny.gguf", format: gguf}
  runtime: {llamacpp: {contextSize: 512}}
"""


def config(name: str, model: str, work: Path, *, chunk: int) -> str:
    """An InferenceConfig and its run: iris rows from a file, predictions to a directory."""
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {{name: {name}}}
spec:
  model:
{model}
  storage:
    input: {{file: {{path: "{work / "in.jsonl"}"}}}}
    output: {{file: {{path: "{work / "out" / name}"}}}}
  runner: {{batchSize: 256, concurrency: 8, chunkSize: {chunk}, maxFailedRecords: 0}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata: {{name: {name}}}
spec:
  configRef: {{name: {name}}}
"""


def write_models(claims: Path) -> None:
    """The iris model (sklearn, in the kserve env) and a tiny GGUF (gguf, in the llama env)."""
    (claims / "iris").mkdir(parents=True, exist_ok=True)
    fit = (
        "import sys, joblib; from sklearn.datasets import load_iris; "
        "from sklearn.linear_model import LogisticRegression; X, y = load_iris(return_X_y=True); "
        "joblib.dump(LogisticRegression(max_iter=1000).fit(X, y), sys.argv[1])"
    )
    kserve = str(ensure_env("kserve").python)
    subprocess.run([kserve, "-c", fit, str(claims / "iris" / "model.joblib")], check=True)
    gguf = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]); "
        "from llama_server import write_model; write_model(Path(sys.argv[1]), name='tiny')"
    )
    llama = str(ensure_env("llama").python)
    servers = str(ROOT / "e2e" / "peers" / "servers")
    subprocess.run([llama, "-c", gguf, str(claims / "tiny.gguf"), servers], check=True)


def deployment(text: str, work: Path) -> LocalDeployment:
    """The deployment of `text`, resolved as `longrun serve` resolves it."""
    path = work / "mdep.yaml"
    path.write_text(text)
    inputs = load_inputs([str(path)], namespace="default")
    obj = next(iter(inputs.deployments.values()))
    claims = {"models": str(work / "claims")}
    return local_deployment(
        obj, inputs, local_serving_settings(), work_dir=work / "state", claims=claims
    )


def start_up(text: str, work: Path, repeats: int) -> list[float]:
    """Seconds from start() to Available, `repeats` times."""
    times = []
    for _ in range(repeats):
        local = deployment(text, work)
        started = time.perf_counter()
        local.start()
        times.append(time.perf_counter() - started)
        local.stop()
    return times


def longrun_run(path: Path, work: Path, name: str) -> dict[str, float]:
    """`longrun run -f path`; the runner's summary (its termination message: recordsRead,
    durationSeconds, to the microsecond)."""
    command = [sys.executable, "-m", "controller.cli", "run", "-f", str(path)]
    done = subprocess.run(
        [*command, "--work-dir", str(work / "state")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise SystemExit(f"longrun run failed:\n{done.stderr[-2000:]}")
    message = work / "state" / "runs" / "default" / name / "pod" / "dev" / "termination-log"
    summary = json.loads(message.read_text())
    return {"records": summary["recordsRead"], "seconds": summary["durationSeconds"]}


def throughput(work: Path, records: int, repeats: int) -> tuple[list[float], list[float]]:
    """records/s through the deployment and straight to the server, interleaved."""
    with (work / "in.jsonl").open("w") as handle:
        for i in range(records):
            handle.write(json.dumps({"x": IRIS[i % 3]}) + "\n")
    local = deployment(KSERVE, work)
    local.start()
    via: list[float] = []
    direct: list[float] = []
    try:
        through = "    deploymentRef: {name: iris}\n    inputFields: [x]"
        straight = (
            f"    protocol: kserve-v1\n    url: http://127.0.0.1:{local.runtime_port}\n"
            "    name: iris\n    inputFields: [x]"
        )
        order = ["via", "direct", "direct", "via"] * repeats
        for index, which in enumerate(order):
            name = f"{which}-{index}"
            path = work / f"{name}.yaml"
            model = through if which == "via" else straight
            path.write_text(config(name, model, work, chunk=10_000))
            got = longrun_run(path, work, name)
            assert got["records"] == records, got
            (via if which == "via" else direct).append(records / got["seconds"])
    finally:
        local.stop()
    return via, direct


def first_record(work: Path, repeats: int) -> list[float]:
    """Seconds from `longrun run` to the first output record, the deployment not served."""
    with (work / "in.jsonl").open("w") as handle:
        for i in range(2000):
            handle.write(json.dumps({"x": IRIS[i % 3]}) + "\n")
    times = []
    for index in range(repeats):
        name = f"idle-{index}"
        path = work / f"{name}.yaml"
        model = "    deploymentRef: {name: iris}\n    inputFields: [x]"
        path.write_text(KSERVE + "---\n" + config(name, model, work, chunk=256))
        out = work / "out" / name
        command = [sys.executable, "-m", "controller.cli", "run", "-f", str(path)]
        command += ["--work-dir", str(work / "state"), "--pvc", f"models={work / 'claims'}"]
        started = time.perf_counter()
        proc = subprocess.Popen(command, stderr=subprocess.DEVNULL, cwd=ROOT)
        first = None
        while proc.poll() is None or first is None:
            if first is None and any(f.stat().st_size for f in out.glob("*") if f.is_file()):
                first = time.perf_counter() - started
            if proc.poll() is not None and first is None:
                break
            time.sleep(0.01)
        proc.wait()
        if first is None:
            raise SystemExit("the run wrote nothing")
        times.append(first)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "")
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as folder:
        work = Path(folder)
        write_models(work / "claims")
        kserve = start_up(KSERVE, work, args.repeats + 1)
        llama = start_up(LLAMA, work, args.repeats + 1)
        print(f"creation to Available, kserve (+nginx): {_s(kserve)}")
        print(f"creation to Available, llama.cpp:       {_s(llama)}")
        via, direct = throughput(work, args.records, args.repeats)
        ratio = statistics.mean(via) / statistics.mean(direct)
        print(f"records/s through the deployment (nginx, key checked): {_r(via)}")
        print(f"records/s straight to the KServe server:               {_r(direct)}")
        print(f"through ÷ direct: {ratio:.3f} (target >= 0.95)")
        idle = first_record(work, args.repeats)
        print(f"time to first record, run against an idle deployment: {_s(idle)}")


def _s(values: list[float]) -> str:
    listed = ", ".join(f"{v:.2f}" for v in values)
    return f"median {statistics.median(values):.2f} s ({listed})"


def _r(values: list[float]) -> str:
    listed = ", ".join(f"{v:,.0f}" for v in values)
    return f"mean {statistics.mean(values):,.0f} ({listed})"


if __name__ == "__main__":
    main()
