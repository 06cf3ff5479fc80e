"""Controller benchmark: run->Job latency, requests and writes per run, CPU, memory. Prints numbers.

It runs on a real control plane (etcd, kube-apiserver, kube-controller-manager v1.36 and the
test node agent; bench/kube_backends.py) when its binaries are found, else on the API emulator;
`--backend` forces one. Every table names the backend. The API server, the controller, the
Job watch and this script's client are separate processes, as in a cluster.

Phase 1, for each MAX_RECONCILE_RATE (4 and 16): create 1,000 one-shot runs at once (8
client threads). Latency is from the moment the API server accepted a run (client-side,
after the POST returned) to the moment its Job reached a watch in another process
(client-side, on receipt). Until every Job has arrived this script waits on that watch
alone, as in phase 2; only then does it list the runs (every 0.5 s) until all have
Succeeded, so that listing a thousand runs does not load the API server while the
latency is measured (before 2026-11-28 it listed them from the start, in this phase
only). Requests and writes come from the controller's own rest_client_requests_total,
divided by the number of runs once all have Succeeded, so they cover a whole one-shot
lifecycle; the controller's Events are counted apart.

Phase 2: an ideal client (bench/ideal_controller.py: one watch, the same three writes per
run, no cache, no queue, no status logic) with the same parallelism, on a fresh cluster of
the same backend: the floor any controller could reach there.

Phase 3 (controller in its own process, so its RSS is its own): 10,000 runs are cached.
Their config is missing, so each gets a status write and a Warning event but no
children; the process's peak RSS (VmHWM) is read from /proc.

Usage: python bench/controller_bench.py [--backend auto|real|emulator] [--runs 1000]
       [--rates 4,16] [--cached 10000]
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from kube_backends import (  # noqa: E402
    BENCH_IMAGE,
    BenchCluster,
    JobClock,
    cpu_of,
    real_available,
    start,
)
from kubernetes import client, config  # noqa: E402

GROUP, VERSION, NS = "longrun.dev", "v1alpha1", "bench"
WRITES = ("POST", "PATCH", "PUT", "DELETE")
CONFIG = {
    "image": BENCH_IMAGE,
    "model": {"protocol": "kserve-v2", "url": "http://iris:8080", "name": "iris"},
    "storage": {"input": {"file": {"path": "/in"}}, "output": {"file": {"path": "/out"}}},
}
LAUNCH = (
    "import argparse, sys\n"
    "from controller.runtime.main import add_parser\n"
    "p = argparse.ArgumentParser()\n"
    "add_parser(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.handler(a))\n"
)
Row = dict[str, Any]


def api_of(cluster: BenchCluster) -> Any:
    return config.new_client_from_config(config_file=cluster.kubeconfig_path)  # type: ignore[no-untyped-call]


def wait_for(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `check` until true; raise after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def create_config(api: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceConfig",
            "metadata": {"name": "cfg"}, "spec": CONFIG}  # fmt: skip
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, NS, "inferenceconfigs", body
    )


def create_runs(api: Any, *, runs: int, config: str, workers: int = 8) -> dict[str, float]:
    """Create `runs` runs concurrently; run name -> the moment the server accepted it."""
    custom = client.CustomObjectsApi(api)
    accepted: dict[str, float] = {}

    def create(i: int) -> None:
        name = f"run-{i:05d}"
        run = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun",
               "metadata": {"name": name}, "spec": {"configRef": {"name": config}}}  # fmt: skip
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "inferenceruns", run)
        accepted[name] = time.monotonic()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, range(runs)))
    return accepted


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def latency_rows(prefix: str, accepted: dict[str, float], seen: dict[str, float]) -> Row:
    missing = sorted(set(accepted) - set(seen))
    if missing:
        raise RuntimeError(f"{len(missing)} runs have no Job, e.g. {missing[:3]}")
    latencies = [seen[name] - t for name, t in accepted.items()]
    first = min(accepted.values())
    return {
        f"{prefix} p50 run->Job (s)": statistics.median(latencies),
        f"{prefix} p99 run->Job (s)": percentile(latencies, 99),
        f"{prefix} max run->Job (s)": max(latencies),
        f"{prefix} all {len(accepted):,} Jobs exist after (s)": max(seen.values()) - first,
    }


def start_controller(kubeconfig: str, *, metrics_port: int, rate: int) -> subprocess.Popen[bytes]:
    """The controller as its own process (its RSS and GIL are its own), like in a pod."""
    env = {
        **os.environ,
        "LEADER_ELECTION": "false",
        "MAX_RECONCILE_RATE": str(rate),
        "METRICS_PORT": str(metrics_port),
        "HEALTH_PORT": "0",
        "LOG_LEVEL": "WARNING",
        "POLLING_INTERVAL": "10m",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, "-c", LAUNCH, "controller", "--kubeconfig", kubeconfig]
    return subprocess.Popen(cmd, env=env, cwd=ROOT)


def free_port() -> int:
    """An unused TCP port on localhost."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> tuple[dict[str, float], dict[str, float]]:
    """(rest_client_requests_total by method, reconcile time sum/count) from /metrics."""
    deadline = time.monotonic() + 60
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
    reconcile = {}
    for name in ("sum", "count"):
        match = re.search(
            rf"^controller_runtime_reconcile_time_seconds_{name}\S* (\S+)$", text, re.M
        )
        reconcile[name] = float(match.group(1)) if match else 0.0
    return {method: float(value) for method, value in found}, reconcile


def all_succeeded(api: Any, runs: int) -> Callable[[], bool]:
    custom = client.CustomObjectsApi(api)

    def check() -> bool:
        items: Any = custom.list_namespaced_custom_object(GROUP, VERSION, NS, "inferenceruns")
        done = [i for i in items["items"]
                if (i.get("status") or {}).get("phase") == "Succeeded"
                and (i.get("status") or {}).get("result")]  # fmt: skip
        return len(done) == runs

    return check


def controller_events(api: Any) -> int:
    """Events the controller wrote in the bench namespace (both APIs show the same objects)."""
    events = client.CoreV1Api(api).list_namespaced_event(NS).items
    return sum(1 for e in events if (e.source and e.source.component) == "longrun-controller")


def phase_controller(backend: str, runs: int, rate: int) -> Row:
    """`runs` runs at once, MAX_RECONCILE_RATE=`rate`: latency, requests, writes, CPU."""
    cluster = start(backend)
    try:
        api = api_of(cluster)
        create_config(api)
        port = free_port()
        proc = start_controller(cluster.kubeconfig_path, metrics_port=port, rate=rate)
        clock = JobClock(cluster.kubeconfig_path)
        try:
            baseline, _ = scrape(port)
            time.sleep(1)
            server_cpu, cpu = cluster.server_cpu(), cpu_of(proc.pid)  # after start-up and sync
            started = time.monotonic()
            accepted = create_runs(api, runs=runs, config="cfg")
            wait_for(lambda: len(clock.times()) >= runs, timeout=900, what="too few Jobs")
            wait_for(all_succeeded(api, runs), timeout=1800, what="runs did not all succeed")
            elapsed = time.monotonic() - started
            time.sleep(3)  # trailing reconciles and queued events
            counts, reconcile = scrape(port)
            cpu = cpu_of(proc.pid) - cpu
            server_cpu = cluster.server_cpu() - server_cpu
            seen = clock.times()
            events = controller_events(api)
        finally:
            clock.stop()
            proc.terminate()
            proc.wait(timeout=30)
        per_run = {m: (counts.get(m, 0) - baseline.get(m, 0)) / runs for m in counts}
        writes = sum(per_run.get(m, 0) for m in WRITES)
        p = f"controller, {rate} workers:"
        return {
            **latency_rows(p, accepted, seen),
            f"{p} all Succeeded after (s)": elapsed,
            f"{p} API requests / run": sum(per_run.values()),
            f"{p} writes / run, Events excluded": writes - events / runs,
            f"{p} Events / run": events / runs,
            f"{p} GET / run": per_run.get("GET", 0),
            f"{p} reconciles / run": reconcile["count"] / runs,
            f"{p} mean reconcile time (ms)": 1000 * reconcile["sum"] / max(reconcile["count"], 1),
            f"{p} controller CPU (s)": cpu,
            f"{p} controller CPU per 1,000 lifecycles (s)": cpu * 1000 / runs,
            f"{p} API server side CPU (s)": server_cpu,
        }
    finally:
        cluster.stop()


def phase_ideal(backend: str, runs: int, workers: int) -> Row:
    """The same runs served by bench/ideal_controller.py with `workers` threads."""
    cluster = start(backend)
    try:
        api = api_of(cluster)
        create_config(api)
        cmd = [sys.executable, str(ROOT / "bench" / "ideal_controller.py"),
               cluster.kubeconfig_path, "cfg", str(workers)]  # fmt: skip
        errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed after the process
        ideal = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=ROOT
        )
        clock = JobClock(cluster.kubeconfig_path)
        try:
            assert ideal.stdout is not None and ideal.stdin is not None
            if ideal.stdout.readline().strip() != "ready":
                errors.seek(0)
                raise RuntimeError(f"the ideal client did not start:\n{errors.read()}")
            cpu = cpu_of(ideal.pid)
            accepted = create_runs(api, runs=runs, config="cfg")

            def all_jobs() -> bool:
                if ideal.poll() is not None:
                    errors.seek(0)
                    raise RuntimeError(f"the ideal client exited:\n{errors.read()}")
                return len(clock.times()) >= runs

            wait_for(all_jobs, timeout=900, what="the ideal client made too few Jobs")
            time.sleep(1)
            seen = clock.times()
            cpu = cpu_of(ideal.pid) - cpu
        finally:
            clock.stop()
            assert ideal.stdin is not None
            ideal.stdin.close()
            ideal.wait(timeout=30)
            errors.close()
        p = f"ideal client, {workers} threads:"
        return {**latency_rows(p, accepted, seen), f"{p} client CPU (s)": cpu}
    finally:
        cluster.stop()


def peak_rss_kib(pid: int) -> int:
    """VmHWM (peak resident set) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def phase_memory(backend: str, cached: int) -> Row:
    """`cached` runs cached by a controller process: its peak RSS."""
    cluster = start(backend)
    try:
        api = api_of(cluster)
        proc = start_controller(cluster.kubeconfig_path, metrics_port=free_port(), rate=4)
        try:
            time.sleep(3)
            idle = peak_rss_kib(proc.pid)
            started = time.monotonic()
            create_runs(api, runs=cached, config="missing")
            custom = client.CustomObjectsApi(api)

            def all_reported() -> bool:
                items: Any = custom.list_namespaced_custom_object(
                    GROUP, VERSION, NS, "inferenceruns"
                )
                return len([i for i in items["items"] if i.get("status")]) == cached

            wait_for(all_reported, timeout=3600, what="runs were not all reconciled")
            return {
                "memory: runs cached": cached,
                "memory: controller RSS at start (MiB)": idle / 1024,
                "memory: controller peak RSS (MiB)": peak_rss_kib(proc.pid) / 1024,
                "memory: all reconciled after (s)": time.monotonic() - started,
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        cluster.stop()


def choose_backend(asked: str) -> str:
    available, where = real_available()
    if asked == "real" and not available:
        sys.exit(f"--backend real: {where}")
    if asked == "auto":
        print(
            f"backend: {'real control plane ' + where if available else 'emulator (' + where + ')'}"
        )
        return "real" if available else "emulator"
    return asked


def main() -> None:
    """Run the phases and print one table naming the backend."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--backend", choices=("auto", "real", "emulator"), default="auto")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rates", default="4,16", help="MAX_RECONCILE_RATE values (%(default)s)")
    parser.add_argument("--cached", type=int, default=10_000, help="0 skips the memory phase")
    args = parser.parse_args()
    backend = choose_backend(args.backend)
    rates = [int(r) for r in args.rates.split(",")]
    rows: Row = {}
    for rate in rates:
        rows |= phase_controller(backend, args.runs, rate)
        rows |= phase_ideal(backend, args.runs, rate)
        print_table(rows, backend)  # as it goes: a long run shows its numbers early
    if args.cached:
        rows |= phase_memory(backend, args.cached)
    print_table(rows, backend)


def print_table(rows: Row, backend: str) -> None:
    name = "real control plane" if backend == "real" else "API emulator"
    width = max(len(k) for k in rows)
    print(f"\n| {('metric (' + name + ')').ljust(width)} | value |")
    print(f"| {'-' * width} | ----- |")
    for key, value in rows.items():
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"| {key.ljust(width)} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
