"""The floor for bench/controller_bench.py: the least any controller could do per new run.

Not a controller: no informers, no cache, no work queue, no retries, no status logic.
One raw watch on InferenceRuns; for every run ADDED, one of WORKERS threads sends the
three writes longrun's first reconcile of a one-shot run sends (POST the contract
ConfigMap, POST the Job, merge-patch /status), over `http.client` kept-alive connections,
with bodies from longrun's own builders (so the API server validates the same objects).
It shows how much of the run->Job latency is the API server's and how much the controller's.

Usage (by controller_bench.py): python bench/ideal_controller.py KUBECONFIG CONFIG_NAME
Runs until stdin closes.
"""

from __future__ import annotations

import http.client
import json
import queue
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core import builders  # noqa: E402
from controller.core.resolve import parse_run_spec, resolve  # noqa: E402
from controller.core.settings import settings_from_env  # noqa: E402

WORKERS = 4
GROUP = "/apis/longrun.dev/v1alpha1"


def server_of(kubeconfig: str) -> tuple[str, int]:
    """Host and port of the kubeconfig's first cluster (plain HTTP, as the emulator serves)."""
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    url = urlsplit(doc["clusters"][0]["cluster"]["server"])
    return url.hostname or "127.0.0.1", url.port or 80


def call(conn: http.client.HTTPConnection, method: str, path: str, body: Any, ctype: str) -> Any:
    """One request; the decoded answer (errors are printed, not retried)."""
    conn.request(method, path, json.dumps(body), {"Content-Type": ctype})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    if resp.status >= 300:
        print(f"{method} {path}: {resp.status} {data.get('message')}", file=sys.stderr)
    return data


def main() -> None:
    kubeconfig, config_name = sys.argv[1], sys.argv[2]
    host, port = server_of(kubeconfig)
    settings = settings_from_env({})
    runs: queue.Queue[dict[str, Any]] = queue.Queue()
    configs: dict[str, Any] = {}

    def lookup(namespace: str, name: str) -> Any:
        if name not in configs:
            conn = http.client.HTTPConnection(host, port)
            conn.request("GET", f"{GROUP}/namespaces/{namespace}/inferenceconfigs/{name}")
            configs[name] = json.loads(conn.getresponse().read())
        return configs[name]

    def watch() -> None:
        conn = http.client.HTTPConnection(host, port)
        conn.request("GET", f"{GROUP}/inferenceruns?watch=true&timeoutSeconds=3600")
        for line in conn.getresponse():
            event = json.loads(line)
            if event["type"] == "ADDED":
                runs.put(event["object"])

    def work() -> None:
        conn = http.client.HTTPConnection(host, port)
        while True:
            run = runs.get()
            spec, _ = parse_run_spec(run)
            resolved = resolve(run, spec, lookup=lookup, settings=settings)  # type: ignore[arg-type]
            meta = run["metadata"]
            ns, name = meta["namespace"], meta["name"]
            config_map = builders.build_config_map(resolved)  # type: ignore[arg-type]
            job = builders.build_job(resolved, settings)  # type: ignore[arg-type]
            call(
                conn, "POST", f"/api/v1/namespaces/{ns}/configmaps", config_map, "application/json"
            )
            call(conn, "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job, "application/json")
            status = {"status": {"phase": "Pending", "jobName": job["metadata"]["name"]}}
            path = f"{GROUP}/namespaces/{ns}/inferenceruns/{name}/status"
            call(conn, "PATCH", path, status, "application/merge-patch+json")

    lookup("bench", config_name)
    for target in (watch, *[work] * WORKERS):
        threading.Thread(target=target, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
