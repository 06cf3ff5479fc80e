"""Load test of the emulator alone: ops/s and emulator CPU per operation, per kind.

`python -m e2e.emulator.loadtest [--n 1000] [--threads 8] [--watchers 2] [--only ...]`

The emulator runs in a child process (`e2e.emulator.child`), so the CPU it
reports (os.times of its own process) is the server's alone: HTTP parsing, decoding,
admission, storage, watch fan-out and the built-in controllers' work. This process
is the cheap client: raw `http.client` connections, one per thread, requests
encoded before the clock starts, plus watch streams like a controller's informers
(inferenceruns, configmaps, jobs, pods, all namespaces, `--watchers` streams of each).

Each phase sends its N requests (ops/s is the rate they were answered), then waits
until the emulator is idle (controllers done, every watch queue drained) and the
watch streams are quiet, so its CPU per op includes the work the requests caused:
for Jobs, the Job controller's pod, the kubelet's status updates, Events and the
finalizer release. CPU time depends on what else the machine runs: compare runs
made back to back, twice. `--py-spy OUT` profiles the emulator while it runs (needs
`pip install py-spy`, which is not a project dependency).
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from e2e.emulator.child import Child

Obj = dict[str, Any]
GROUP, VERSION, NS = "longrun.dev", "v1alpha1", "load"
RUNS = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/inferenceruns"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
EVENTS = f"/api/v1/namespaces/{NS}/events"
WATCHED = {
    "inferenceruns": f"/apis/{GROUP}/{VERSION}/inferenceruns",
    "configmaps": "/api/v1/configmaps",
    "jobs": "/apis/batch/v1/jobs",
    "pods": "/api/v1/pods",
}
JSON = "application/json"
MERGE = "application/merge-patch+json"


# -- the client's side -----------------------------------------------------------------
Request = tuple[str, str, bytes | None, str]  # method, path, body, content type


def request(method: str, path: str, body: Obj | None = None, ctype: str = JSON) -> Request:
    """A request encoded before the clock starts, so the client stays cheap."""
    return method, path, json.dumps(body).encode() if body is not None else None, ctype


class Client:
    """One keep-alive connection; raises on an unexpected status."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)

    def call(self, req: Request) -> bytes:
        method, path, data, ctype = req
        headers = {"Accept": JSON}
        if data is not None:
            headers["Content-Type"] = ctype
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        out = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {out[:300]!r}")
        return out


class WatchReader(threading.Thread):
    """A watch stream counting the events it receives (like an informer, minus the cache)."""

    def __init__(self, url: str, path: str) -> None:
        super().__init__(daemon=True)
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=3600)
        self.path = path
        self.events = 0
        self.ready = threading.Event()

    def run(self) -> None:
        self.conn.request("GET", self.path + "?watch=true&allowWatchBookmarks=true")
        resp = self.conn.getresponse()
        self.ready.set()
        try:
            while data := resp.read1(65536):  # de-chunked; one JSON line per event
                self.events += data.count(b"\n")
        except (OSError, http.client.HTTPException):
            pass  # the emulator stopped


def run_body(i: int) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceRun",
        "metadata": {"name": f"run-{i:05d}", "labels": {"team": "load"}},
        "spec": {"configRef": {"name": "cfg"}},
    }


def child_meta(i: int, uid: str, name: str) -> Obj:
    run = f"run-{i:05d}"
    return {
        "name": name,
        "namespace": NS,
        "labels": {"app.kubernetes.io/managed-by": "longrun", "longrun.dev/run": run},
        "annotations": {"longrun.dev/run": run},
        "ownerReferences": [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "InferenceRun",
                "name": run,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def config_map_body(i: int, uid: str) -> Obj:
    contract = {"run": {"name": f"run-{i:05d}", "uid": uid}, "model": {"url": "http://m:8080"}}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_meta(i, uid, f"run-{i:05d}-contract"),
        "data": {"contract.json": json.dumps(contract) * 4},
    }


def job_body(i: int, uid: str) -> Obj:
    run = f"run-{i:05d}"
    meta = child_meta(i, uid, f"{run}-job")
    env: list[Obj] = [{"name": "CONTRACT_PATH", "value": "/etc/longrun/contract.json"}]
    env += [{"name": n, "value": run} for n in ("RUN_NAME", "RUN_NAMESPACE", "RUN_UID")]
    env.append({"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}})
    container = {
        "name": "runner",
        "image": "ghcr.io/longrun/runner:load",
        "env": env,
        "volumeMounts": [
            {"name": "contract", "mountPath": "/etc/longrun", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 3,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": "runner",
                            "operator": "In",
                            "values": [2],
                        },
                    },
                    {
                        "action": "Ignore",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    },
                ]
            },
            "template": {
                "metadata": {
                    "labels": dict(meta["labels"]),
                    "annotations": {"longrun.dev/run": run},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532},
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "contract",
                            "configMap": {
                                "name": f"{run}-contract",
                                "items": [{"key": "contract.json", "path": "contract.json"}],
                            },
                        },
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def status_patch(i: int, gen: int) -> Obj:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run = f"run-{i:05d}"
    cond = {
        "type": "Accepted",
        "status": "True",
        "reason": "Valid",
        "message": "",
        "lastTransitionTime": stamp,
        "observedGeneration": 1,
    }
    running = {**cond, "type": "Running", "reason": "JobRunning", "message": f"round {gen}"}
    return {
        "status": {
            "phase": "Running",
            "observedGeneration": 1,
            "conditions": [cond, running],
            "configMapName": f"{run}-contract",
            "jobName": f"{run}-job",
            "startTime": stamp,
        }
    }


def event_body(i: int, uid: str) -> Obj:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run = f"run-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{run}.", "namespace": NS},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceRun",
            "name": run,
            "namespace": NS,
            "uid": uid,
            "resourceVersion": "1",
        },
        "type": "Normal",
        "reason": "Created",
        "message": f"Created Job {run}-job",
        "source": {"component": "longrun-controller"},
        "reportingComponent": "longrun.dev/controller",
        "reportingInstance": "loadtest",
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


# -- phases ------------------------------------------------------------------------------
class Bench:
    """Runs phases against the child emulator and measures them."""

    def __init__(self, child: Child, *, threads: int, watches: list[WatchReader]) -> None:
        self.child = child
        self.threads = threads
        self.watches = watches
        self.local = threading.local()

    def client(self) -> Client:
        if not hasattr(self.local, "client"):
            self.local.client = Client(self.child.url)
        return self.local.client  # type: ignore[no-any-return]

    def phase(self, requests: list[Request]) -> tuple[float, float, float, list[bytes]]:
        """(ops/s, emulator CPU µs/op, of which system, responses) of sending `requests`."""
        responses: list[bytes] = [b""] * len(requests)
        cpu0 = self.child.cpu()
        start = time.perf_counter()
        with ThreadPoolExecutor(self.threads) as pool:
            jobs = [pool.submit(self._slice, requests, responses, t) for t in range(self.threads)]
            for fut in jobs:
                fut.result()
        wall = time.perf_counter() - start
        self.settle()
        user, system = (b - a for a, b in zip(cpu0, self.child.cpu(), strict=True))
        per_op = 1e6 / len(requests)
        return len(requests) / wall, (user + system) * per_op, system * per_op, responses

    def _slice(self, requests: list[Request], responses: list[bytes], t: int) -> None:
        c = self.client()
        for i in range(t, len(requests), self.threads):
            responses[i] = c.call(requests[i])

    def settle(self) -> None:
        """Wait for the emulator's controllers and watch queues, then quiet watch streams."""
        if self.child.ask("idle") != "ok":
            raise RuntimeError("emulator did not become idle")
        last = -1
        while (total := sum(w.events for w in self.watches)) != last:
            last = total
            time.sleep(0.1)


Row = tuple[str, float, float, float]  # operation, ops/s, CPU µs/op, system CPU µs/op


PHASES = ("configmaps", "jobs", "status", "events", "get", "list")


def run_phases(bench: Bench, n: int, only: tuple[str, ...] = PHASES) -> list[Row]:
    """Every measured phase, in the order a controller's work would cause them.

    The runs are always created (the other phases refer to them); `only` picks the rest.
    """
    rows: list[Row] = []

    def measure(name: str, requests: list[Request]) -> list[bytes]:
        rate, cpu, system, responses = bench.phase(requests)
        rows.append((name, rate, cpu, system))
        return responses

    runs = [request("POST", RUNS, run_body(i)) for i in range(n)]
    created = measure("create inferenceruns", runs)
    uids = [json.loads(r)["metadata"]["uid"] for r in created]
    if "configmaps" in only:
        cms = [request("POST", CONFIGMAPS, config_map_body(i, uids[i])) for i in range(n)]
        measure("create configmaps", cms)
    if "jobs" in only:
        jobs = [request("POST", JOBS, job_body(i, uids[i])) for i in range(n)]
        measure("create jobs (+pods)", jobs)
    if "status" in only:
        patches = [
            request("PATCH", f"{RUNS}/run-{i % n:05d}/status", status_patch(i % n, i // n), MERGE)
            for i in range(2 * n)
        ]
        measure("patch inferenceruns/status", patches)
    if "events" in only:
        events = [request("POST", EVENTS, event_body(i, uids[i])) for i in range(n)]
        measure("create events", events)
    if "get" in only:
        measure("get inferenceruns", [request("GET", f"{RUNS}/run-{i:05d}") for i in range(n)])
    if "list" in only and "configmaps" in only:
        selector = "?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dlongrun"
        lists = [request("GET", CONFIGMAPS + selector)] * max(5, n // 100)
        measure(f"list configmaps ({n} items)", lists)
    return rows


def setup(url: str) -> None:
    """Namespace and longrun's CRDs, through the official client as the controller bench does."""
    from kubernetes import client

    from controller.crds import generate_crds

    cfg = client.Configuration()
    cfg.host = url
    with client.ApiClient(cfg) as api:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})  # type: ignore[arg-type]
        ext = client.ApiextensionsV1Api(api)
        for crd in generate_crds():
            ext.create_custom_resource_definition(crd)  # type: ignore[arg-type]
    c = Client(url)
    deadline = time.monotonic() + 10
    while True:  # the CRD's resources are served at once, but be sure
        try:
            c.call(request("GET", RUNS))
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.emulator.loadtest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=1000, help="objects per kind")
    parser.add_argument("--threads", type=int, default=8, help="client threads")
    parser.add_argument("--watchers", type=int, default=2, help="watch streams per resource")
    parser.add_argument(
        "--only",
        default=",".join(PHASES),
        help=f"phases after creating the runs (default: all of {','.join(PHASES)})",
    )
    parser.add_argument(
        "--py-spy",
        metavar="OUT",
        help="profile the emulator with py-spy (installed separately) to OUT, collapsed stacks",
    )
    args = parser.parse_args(argv)
    child = Child()
    spy = None
    try:
        setup(child.url)
        if args.py_spy:
            spy = subprocess.Popen(
                [
                    *("py-spy", "record", "--gil", "--format", "raw", "--rate", "250"),
                    *("--pid", str(child.proc.pid), "--output", args.py_spy),
                ],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(1)
        watches = [
            WatchReader(child.url, path) for path in WATCHED.values() for _ in range(args.watchers)
        ]
        for w in watches:
            w.start()
            w.ready.wait(10)
        bench = Bench(child, threads=args.threads, watches=watches)
        rows = run_phases(bench, args.n, tuple(args.only.split(",")))
        print(f"n={args.n} threads={args.threads} watchers/resource={args.watchers}")
        print(f"{'operation':<34}{'ops/s':>10}{'emulator CPU µs/op':>22}{'(system)':>10}")
        for name, rate, cpu, system in rows:
            print(f"{name:<34}{rate:>10.0f}{cpu:>22.0f}{system:>10.0f}")
        print(f"watch events received: {sum(w.events for w in watches)}")
    finally:
        child.stop()
        if spy is not None:
            spy.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
