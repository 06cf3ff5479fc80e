"""Draw docs/images/dashboard.png: the Grafana dashboard's panels, from a real run's metrics.

There is no Grafana on this machine, so this is not a Grafana screenshot. What is real:
the whole system of e2e/system.py (the API emulator, `longrun controller` as a process, the
runner as the pod's process, started with the pod template's LONGRUN_METRICS_PORT), a local
KServe v2 model server (below: it answers in ~0.2 s, 503 on 4 % of requests and 400 on a batch
holding a "poison" value), and a real Prometheus (Debian's `prometheus` binary) scraping the
controller's /metrics and the runner's every second. Each panel is then the Prometheus answer
to the panel's own PromQL from charts/longrun/dashboards/longrun.json (`$__rate_interval`
replaced by 15s, `$namespace` and `$run` by `.*`), drawn with matplotlib at the panel's grid
position. The PodMonitor's `run` and `namespace` labels are static target labels here (no
Kubernetes service discovery against the emulator).

    .venv/bin/python scripts/dashboard_picture.py   # needs `apt-get install prometheus`
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import matplotlib  # noqa: E402
import yaml  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from e2e.system import System, free_port  # noqa: E402

BOARD = ROOT / "charts" / "longrun" / "dashboards" / "longrun.json"
OUT = ROOT / "docs" / "images" / "dashboard.png"
RUNNER_PORT = 9095  # controller/core/runnerpod.py METRICS_PORT
NAMESPACE, RUN = "demo", "nightly-scoring"
RECORDS, POISON_EVERY = 4000, 250


class Model(BaseHTTPRequestHandler):
    """A KServe v2 REST model: doubles row sums, slow, sometimes unavailable, refuses poison."""

    rng = random.Random(7)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.rng.uniform(0.1, 0.3))
        tensor = body["inputs"][0]
        rows = tensor["shape"][0]
        if self.rng.random() < 0.04:
            return self._answer(503, {"error": "busy"})
        if -1.0 in tensor["data"]:
            return self._answer(400, {"error": "poison value"})
        width = len(tensor["data"]) // rows
        data = [sum(tensor["data"][i * width : (i + 1) * width]) * 2 for i in range(rows)]
        out = {"name": "out", "shape": [rows], "datatype": "FP32", "data": data}
        self._answer(200, {"model_name": "m", "outputs": [out]})

    def _answer(self, status: int, payload: Any) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *_args: Any) -> None:
        pass  # quiet: the picture script prints only the run's result


def manifests(model_url: str, data: Path) -> str:
    with (data / "in.jsonl").open("w") as handle:
        for i in range(RECORDS):
            a = -1.0 if i % POISON_EVERY == 17 else float(i % 50)
            handle.write(json.dumps({"id": i, "a": a, "b": 1.0}) + "\n")
    config = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": RUN},
        "spec": {
            "model": {
                "protocol": "kserve-v2",
                "url": model_url,
                "name": "m",
                "binaryData": False,
                "inputFields": ["a", "b"],
            },
            "storage": {
                "input": {"file": {"path": str(data / "in.jsonl"), "idField": "id"}},
                "output": {"file": {"path": str(data / "out")}},
            },
            "runner": {"batchSize": 8, "concurrency": 4, "chunkSize": 200, "maxFailedRecords": 100},
        },
    }
    run = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": RUN},
        "spec": {"configRef": {"name": RUN}},
    }
    return str(yaml.safe_dump_all([config, run]))


def start_prometheus(work: Path, controller_port: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "longrun-controller",
                "static_configs": [{"targets": [f"127.0.0.1:{controller_port}"]}],
            },
            {
                "job_name": "longrun-runners",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{RUNNER_PORT}"],
                        "labels": {"namespace": NAMESPACE, "run": RUN},
                    }
                ],
            },
        ],
    }
    (work / "prometheus.yml").write_text(json.dumps(config))
    argv = [
        shutil.which("prometheus") or "prometheus",
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def query(prom: int, path: str, **params: Any) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{prom}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as answer:
        return list(json.loads(answer.read())["data"]["result"])


def promql(expr: str) -> str:
    return expr.replace("$__rate_interval", "15s").replace("$namespace", ".*").replace("$run", ".*")


def legend(fmt: str, labels: dict[str, str]) -> str:
    for key, value in labels.items():
        fmt = fmt.replace("{{" + key + "}}", value)
    return fmt


def run_system(work: Path) -> tuple[subprocess.Popen[bytes], int, float, float]:
    """Run the demo; returns (Prometheus, its port, start, end), Prometheus still running."""
    model = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    system = System(work / "system").start()
    prom, prom_port = start_prometheus(work, system.metrics_port)
    try:
        start = time.time()
        time.sleep(5)  # some controller samples before the run
        ns = system.namespace(NAMESPACE)
        data = work / "data"
        data.mkdir()
        text = manifests(f"http://127.0.0.1:{model.server_port}", data)
        system.kubectl("apply", "-n", ns, "-f", "-", input=text)
        phase, last = "", ""
        while phase not in ("Succeeded", "Failed"):
            time.sleep(1)
            run = system.get("inferencerun", RUN, ns) or {}
            phase = (run.get("status") or {}).get("phase", "")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{RUNNER_PORT}/metrics") as a:
                    last = a.read().decode()
            except OSError:
                pass
        # Other local runs (tests) may hold port 9095: then this runner fell back to a free port
        # and Prometheus scraped someone else's. Refuse to draw that.
        if f"longrun_runner_input_records {float(RECORDS)}" not in last:
            raise SystemExit(f"port {RUNNER_PORT} served another runner's metrics: run again")
        print(f"run {phase}: {json.dumps((run.get('status') or {}).get('result'))}")
        time.sleep(5)
        end = time.time()
    finally:
        system.stop()
        model.shutdown()
    return prom, prom_port, start, end


def draw(prom: int, start: float, end: float) -> None:
    board = json.loads(BOARD.read_text())
    fig = plt.figure(figsize=(24, 19), facecolor="#111217")
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in board["panels"])
    unit_h = 1.0 / (rows + 2.5)
    for panel in board["panels"]:
        g = panel["gridPos"]
        left, width = g["x"] / 24 + 0.004, g["w"] / 24 - 0.008
        bottom = 1 - (g["y"] + g["h"] + 1.2) * unit_h
        if panel["type"] == "row":
            fig.text(0.005, bottom + 0.3 * unit_h, panel["title"], color="white", fontsize=17)
            continue
        ax = fig.add_axes((left, bottom + 0.1 * unit_h, width, g["h"] * unit_h - 0.55 * unit_h))
        ax.set_facecolor("#181b1f")
        ax.set_title(panel["title"], color="#ccccdc", fontsize=12, loc="left")
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        ax.tick_params(colors="#8e8e8e", labelsize=8)
        draw_panel(ax, panel, prom, start, end)
    fig.text(
        0.005,
        0.004,
        "Not Grafana: each panel is Prometheus 2.42's answer to that panel's PromQL in "
        "charts/longrun/dashboards/longrun.json ($__rate_interval=15s), scraped every 1 s from a "
        "real run (API emulator, `longrun controller`, the runner process, a local KServe v2 "
        "model), drawn with matplotlib by scripts/dashboard_picture.py.",
        color="#8e8e8e",
        fontsize=10,
    )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=72, facecolor=fig.get_facecolor())
    print(f"wrote {OUT}")


def draw_panel(ax: Any, panel: dict[str, Any], prom: int, start: float, end: float) -> None:
    unit = panel["fieldConfig"]["defaults"].get("unit", "short")
    if panel["type"] in ("stat", "bargauge"):
        ax.set_xticks([])
        ax.set_yticks([])
        found = [
            (legend(t["legendFormat"], r["metric"]), float(r["value"][1]))
            for t in panel["targets"]
            for r in query(prom, "query", query=promql(t["expr"]), time=end)
        ]
        if not found:  # a run's series go stale once its pod is gone: its last value
            found = [
                (legend(t["legendFormat"], r["metric"]), float(r["values"][-1][1]))
                for t in panel["targets"]
                for r in query(
                    prom, "query_range", query=promql(t["expr"]), start=start, end=end, step=1
                )
            ]
        text = "\n".join(
            f"{name}: {value:.4g}{'%' if unit == 'percent' else ''}" for name, value in found
        )
        ax.text(0.5, 0.5, text or "No data", color="#73bf69", fontsize=16, ha="center", va="center")
        return
    plotted = False
    for target in panel["targets"]:
        for series in query(
            prom, "query_range", query=promql(target["expr"]), start=start, end=end, step=1
        ):
            xs = [float(t) - start for t, _ in series["values"]]
            ys = [float(v) for _, v in series["values"]]
            ax.plot(xs, ys, linewidth=1.6, label=legend(target["legendFormat"], series["metric"]))
            plotted = True
    ax.set_xlabel("seconds", color="#8e8e8e", fontsize=8)
    if unit in ("s", "ops", "reqps"):
        ax.set_ylabel(
            {"s": "seconds", "ops": "per second", "reqps": "requests/s"}[unit],
            color="#8e8e8e",
            fontsize=8,
        )
    if plotted:
        ax.legend(
            fontsize=8,
            facecolor="#181b1f",
            labelcolor="#ccccdc",
            edgecolor="#2c3235",
            loc="upper left",
        )
    else:
        ax.text(0.5, 0.5, "No data", color="#8e8e8e", transform=ax.transAxes, ha="center")


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="longrun-dashboard-"))
    prom, port, start, end = run_system(work)
    try:
        time.sleep(2)
        draw(port, start, end)
    finally:
        prom.terminate()
        prom.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
