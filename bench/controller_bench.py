"""Controller benchmark on the API emulator: latency, requests per run, memory. Prints numbers.

The emulator, the controller and this script's client each run in their own process, as the
API server, the controller's pod and `kubectl` would: none takes the others' GIL.

Phase 1 (requests counted by the controller's rest_client_requests_total): create 1,000
one-shot runs at once with MAX_RECONCILE_RATE=4; latency is measured from the moment the
API server accepted a run (client-side, after the POST returned) to the moment it stored
the run's Job (a store listener in the emulator's process; both read CLOCK_MONOTONIC).
Requests and writes (events included) are divided by the number of runs once all
have finished, so they cover a whole one-shot lifecycle.

Phase 2 (controller in a separate process, so its RSS is its own): 10,000 runs are
cached. Their config is missing, so each gets a status write and a Warning event
but no children; the process's peak RSS (VmHWM) is read from /proc.

Usage: python bench/controller_bench.py [--runs 1000] [--cached 10000]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client, config  # noqa: E402

from controller.crds import generate_crds  # noqa: E402
from e2e.emulator.child import Child  # noqa: E402

GROUP, VERSION, NS = "longrun.dev", "v1alpha1", "bench"
WRITES = ("POST", "PATCH", "PUT", "DELETE")
CONFIG = {
    "image": "ghcr.io/longrun/runner:bench",
    "model": {"protocol": "kserve-v2", "url": "http://iris:8080", "name": "iris"},
    "storage": {"input": {"file": {"path": "/in"}}, "output": {"file": {"path": "/out"}}},
}
SUMMARY = '{"recordsRead": 100, "recordsWritten": 100, "durationSeconds": 0.1}'
LAUNCH = (
    "import argparse, sys\n"
    "from controller.runtime.main import add_parser\n"
    "p = argparse.ArgumentParser()\n"
    "add_parser(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.handler(a))\n"
)


def install_crds(api: Any) -> None:
    """Install longrun's CRDs, as generated from the schemas."""
    ext = client.ApiextensionsV1Api(api)
    for crd in generate_crds():
        ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `check` until true; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)


def create_objects(
    api: Any, *, runs: int, config: str, workers: int = 8, make_config: bool = True
) -> dict[str, float]:
    """Create the config (if named) and `runs` runs concurrently; name -> accepted time."""
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceConfig",
        "metadata": {"name": "cfg"},
        "spec": CONFIG,
    }
    if config == "cfg" and make_config:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "inferenceconfigs", body)
    accepted: dict[str, float] = {}

    def create(i: int) -> None:
        name = f"run-{i:05d}"
        run = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceRun",
            "metadata": {"name": name},
            "spec": {"configRef": {"name": config}},
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "inferenceruns", run)
        accepted[name] = time.monotonic()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, range(runs)))
    return accepted


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def emulator() -> tuple[Child, Any]:
    """A fresh emulator process (every pod exits 0 with SUMMARY) with longrun's CRDs and
    the bench namespace, and an API client for it."""
    emu = Child(summary=SUMMARY)
    api = config.new_client_from_config(config_file=emu.kubeconfig_path)  # type: ignore[no-untyped-call]
    install_crds(api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})  # type: ignore[arg-type]
    return emu, api


def cpu_total(emu: Child) -> float:
    """User + system CPU seconds of the emulator process so far."""
    return sum(emu.cpu())


def start_controller(emu: Child, *, metrics_port: int) -> subprocess.Popen[bytes]:
    """The controller as its own process (its RSS and GIL are its own), like in a pod."""
    env = {
        **os.environ,
        "LEADER_ELECTION": "false",
        "MAX_RECONCILE_RATE": "4",
        "METRICS_PORT": str(metrics_port),
        "HEALTH_PORT": "0",
        "LOG_LEVEL": "WARNING",
        "POLLING_INTERVAL": "10m",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, "-c", LAUNCH, "controller", "--kubeconfig", str(emu.kubeconfig_path)]
    return subprocess.Popen(cmd, env=env, cwd=ROOT)


def free_port() -> int:
    """An unused TCP port on localhost."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


reconcile: dict[str, float] = {}


def scrape_requests(port: int) -> dict[str, float]:
    """rest_client_requests_total by method, from the controller's /metrics."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                text = resp.read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    found = re.findall(r'^rest_client_requests_total\{method="(\w+)"\} (\S+)$', text, re.M)
    counts = {method: float(value) for method, value in found}
    for name in ("sum", "count"):
        match = re.search(
            rf"^controller_runtime_reconcile_time_seconds_{name}\S* (\S+)$", text, re.M
        )
        reconcile[name] = float(match.group(1)) if match else 0.0
    return counts


def phase_latency(runs: int) -> dict[str, float]:
    """1,000 runs at once: run->Job latency, requests and writes per one-shot lifecycle."""
    emu, api = emulator()
    try:
        port = free_port()
        proc = start_controller(emu, metrics_port=port)
        try:
            baseline = scrape_requests(port)
            time.sleep(1)
            emu_cpu = cpu_total(emu)
            started = time.monotonic()
            accepted = create_objects(api, runs=runs, config="cfg")
            custom = client.CustomObjectsApi(api)

            def all_done() -> bool:
                items: Any = custom.list_namespaced_custom_object(
                    GROUP, VERSION, NS, "inferenceruns"
                )
                done = [
                    i
                    for i in items["items"]
                    if (i.get("status") or {}).get("phase") == "Succeeded"
                    and (i.get("status") or {}).get("result")
                ]
                return len(done) == runs

            wait_for(all_done, timeout=900, what="runs did not finish")
            elapsed = time.monotonic() - started
            time.sleep(3)  # trailing reconciles and queued events
            counts = scrape_requests(port)
            rss = peak_rss_kib(proc.pid)
            cpu = cpu_seconds(proc.pid)
            emu_cpu = cpu_total(emu) - emu_cpu
            job_seen = emu.job_times()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        per_run = {m: (counts.get(m, 0) - baseline.get(m, 0)) / runs for m in counts}
        latencies = [job_seen[name] - t for name, t in accepted.items()]
        return {
            "runs": runs,
            "p50 run->Job (s)": statistics.median(latencies),
            "p99 run->Job (s)": percentile(latencies, 99),
            "max run->Job (s)": max(latencies),
            "all Succeeded after (s)": elapsed,
            "API requests / run": sum(per_run.values()),
            "writes / run (events incl.)": sum(per_run.get(m, 0) for m in WRITES),
            "POST / run": per_run.get("POST", 0),
            "PATCH / run": per_run.get("PATCH", 0),
            "GET / run": per_run.get("GET", 0),
            "controller CPU time (s)": cpu,
            "API emulator CPU time (s)": emu_cpu,
            "reconciles / run": reconcile["count"] / runs,
            "mean reconcile time (ms)": 1000 * reconcile["sum"] / max(reconcile["count"], 1),
            "controller peak RSS, 1,000 runs + children (MiB)": rss / 1024,
        }
    finally:
        emu.stop()


def phase_floor(runs: int) -> dict[str, float]:
    """The same 1,000 runs served by bench/ideal_controller.py: the API server's share."""
    emu, api = emulator()
    try:
        custom = client.CustomObjectsApi(api)
        body: dict[str, Any] = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceConfig"}
        body |= {"metadata": {"name": "cfg"}, "spec": CONFIG}
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "inferenceconfigs", body)
        cmd = [sys.executable, str(ROOT / "bench" / "ideal_controller.py"), emu.kubeconfig_path]
        ideal = subprocess.Popen(
            [*cmd, "cfg"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        try:
            assert ideal.stdout is not None and ideal.stdin is not None
            ideal.stdout.readline()  # "ready"
            accepted = create_objects(api, runs=runs, config="cfg", make_config=False)
            wait_for(lambda: len(emu.job_times()) >= runs, timeout=600, what="no Jobs")
            job_seen = emu.job_times()
        finally:
            assert ideal.stdin is not None
            ideal.stdin.close()
            ideal.wait(timeout=30)
        latencies = [job_seen[name] - t for name, t in accepted.items()]
        return {
            "floor: ideal 4-thread client p50 run->Job (s)": statistics.median(latencies),
            "floor: ideal 4-thread client p99 run->Job (s)": percentile(latencies, 99),
        }
    finally:
        emu.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def phase_memory(cached: int) -> dict[str, float]:
    """10,000 runs cached by a controller process: its peak RSS."""
    emu, api = emulator()
    try:
        proc = start_controller(emu, metrics_port=free_port())
        try:
            time.sleep(3)
            idle = peak_rss_kib(proc.pid)
            started = time.monotonic()
            create_objects(api, runs=cached, config="missing")
            custom = client.CustomObjectsApi(api)

            def all_reported() -> bool:
                items: Any = custom.list_namespaced_custom_object(
                    GROUP, VERSION, NS, "inferenceruns"
                )
                return len([i for i in items["items"] if i.get("status")]) == cached

            wait_for(all_reported, timeout=1800, what="runs were not all reconciled")
            elapsed = time.monotonic() - started
            return {
                "runs cached": cached,
                "controller RSS at start (MiB)": idle / 1024,
                "controller peak RSS (MiB)": peak_rss_kib(proc.pid) / 1024,
                "all reconciled after (s)": elapsed,
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        emu.stop()


def main() -> None:
    """Run both phases and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--cached", type=int, default=10_000)
    args = parser.parse_args()
    rows = {**phase_latency(args.runs), **phase_floor(args.runs), **phase_memory(args.cached)}
    width = max(len(k) for k in rows)
    print(f"| {'metric'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----- |")
    for key, value in rows.items():
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"| {key.ljust(width)} | {shown} |")


if __name__ == "__main__":
    main()
