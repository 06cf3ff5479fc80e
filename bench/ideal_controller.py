"""The floor for bench/controller_bench.py: the least any controller could do per new run.

Not a controller: no informers, no cache, no work queue, no retries, no status logic.
One raw watch on InferenceRuns; for every run ADDED, one of WORKERS (default 4) threads sends the
three writes longrun's first reconcile of a one-shot run sends (POST the contract
ConfigMap, POST the Job, merge-patch /status), over `http.client` kept-alive connections,
with bodies from longrun's own builders (so the API server validates the same objects).
It shows how much of the run->Job latency is the API server's and how much the controller's.

Usage (by controller_bench.py): python bench/ideal_controller.py KUBECONFIG CONFIG_NAME [WORKERS]
Runs until stdin closes.
"""

from __future__ import annotations

import http.client
import json
import queue
import ssl
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.core import builders  # noqa: E402
from controller.core.resolve import parse_run_spec, resolve  # noqa: E402
from controller.core.settings import settings_from_env  # noqa: E402

WORKERS = 4
GROUP = "/apis/longrun.dev/v1alpha1"


def connect(kubeconfig: str) -> Callable[[], http.client.HTTPConnection]:
    """A factory of kept-alive connections to the kubeconfig's server: plain HTTP for the
    emulator, HTTPS with the kubeconfig's client certificate for a real API server."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    url = urlsplit(cfg.host)
    host, port = url.hostname or "127.0.0.1", url.port
    if url.scheme != "https":
        return lambda: http.client.HTTPConnection(host, port or 80)
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, cfg.key_file)
    return lambda: http.client.HTTPSConnection(host, port or 443, context=context)


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
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else WORKERS
    new_connection = connect(kubeconfig)
    settings = settings_from_env({})
    runs: queue.Queue[dict[str, Any]] = queue.Queue()
    configs: dict[str, Any] = {}

    def lookup(namespace: str, name: str) -> Any:
        if name not in configs:
            conn = new_connection()
            conn.request("GET", f"{GROUP}/namespaces/{namespace}/inferenceconfigs/{name}")
            configs[name] = json.loads(conn.getresponse().read())
        return configs[name]

    def watch() -> None:
        # A run seen twice (after a re-watch lists what exists again) is served once.
        seen: set[str] = set()
        while True:
            conn = new_connection()
            conn.request("GET", f"{GROUP}/inferenceruns?watch=true&timeoutSeconds=3600")
            resp = conn.getresponse()
            if resp.status != 200:  # e.g. a CRD's resource not served yet: watch again
                print(f"watch: {resp.status} {resp.read()[:200]!r}", file=sys.stderr)
                time.sleep(0.2)
                continue
            for line in resp:
                event = json.loads(line)
                uid = event.get("object", {}).get("metadata", {}).get("uid")
                if event.get("type") == "ADDED" and uid not in seen:
                    seen.add(uid)
                    runs.put(event["object"])

    def work() -> None:
        conn = new_connection()
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
    for target in (watch, *[work] * workers):
        threading.Thread(target=target, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
