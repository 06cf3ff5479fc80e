"""Admission to first record: how soon a queued run writes once Kueue un-suspends its Job.

Issue #28's target: at most 2 s from the moment Kueue un-suspends the Job to the first record
written. Printed, not asserted.

Real: the same whole system as tests/kueue (e2e/kueue/fixtures.py): kube-apiserver, etcd and
kube-controller-manager (e2e/real), Kueue's manager (e2e/kueue), the queues of
testdata/kueue/queues.yaml, `longrun controller` as a process, the node agent running each pod
as the real runner (`python -m runners`), KServe's model server (e2e/peers), a JSONL input.
Each run is the queued example with one record per chunk, so its first chunk file is its
first record written.

Method, per run (one after the other; `--runs`): a second run `blocker` holds the quota, so the
measured run waits, `Queued`; the blocker is deleted, Kueue admits the run and un-suspends its
Job. Stamped on this machine's wall clock, by a watch of the namespace's Jobs and Pods in this
process: when the Job's `spec.suspend` turns false (Kueue's write, seen by the watch), when its
pod is created, when the pod is Running (the node agent started the runner); and, polling the
output directory every 5 ms, when the first chunk file was written (its mtime). Columns:
seconds from the un-suspension to each of those.

    .venv/bin/python bench/kueue_admission.py --runs 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from e2e.fixtures import eventually  # noqa: E402
from e2e.kueue import KueueManager, KueueNotFound, find_kueue  # noqa: E402
from e2e.peers.server import PeerServer, start  # noqa: E402
from e2e.real import AssetsNotFound, find_assets  # noqa: E402
from e2e.system import System  # noqa: E402

ROOT = HERE.parent
QUEUES = ROOT / "testdata" / "kueue" / "queues.yaml"
Obj = dict[str, Any]


class Stamps:
    """Wall-clock times of what the watches saw, per Job name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.resumed: dict[str, float] = {}
        self.pod_created: dict[str, float] = {}
        self.pod_running: dict[str, float] = {}

    def first(self, table: dict[str, float], job: str) -> None:
        with self.lock:
            table.setdefault(job, time.time())


def watch(system: System, ns: str, stamps: Stamps, stop: threading.Event) -> None:
    """Stamp Job un-suspensions and pod creations/starts as the watches deliver them."""
    from kubernetes import client, watch

    assert system.handle is not None
    api = system.handle.api_client()
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    new_watch: Any = watch.Watch  # untyped

    def jobs() -> None:
        for event in new_watch().stream(batch.list_namespaced_job, ns, timeout_seconds=3600):
            job = event["object"]
            if stop.is_set():
                return
            if job.spec.suspend is False:
                stamps.first(stamps.resumed, job.metadata.name)

    def pods() -> None:
        for event in new_watch().stream(core.list_namespaced_pod, ns, timeout_seconds=3600):
            pod = event["object"]
            if stop.is_set():
                return
            job = (pod.metadata.labels or {}).get("batch.kubernetes.io/job-name", "")
            stamps.first(stamps.pod_created, job)
            if pod.status.phase == "Running":
                stamps.first(stamps.pod_running, job)

    def quietly(target: Any) -> None:
        try:
            target()
        except Exception:  # the API server stopped under the watch: the bench is over
            if not stop.is_set():
                raise

    for target in (jobs, pods):
        threading.Thread(target=quietly, args=(target,), daemon=True).start()


def objects(model: PeerServer, data: Path, *, name: str, records: int) -> list[Obj]:
    """A queued run of `records` flowers, one per request and per chunk."""
    data.mkdir(parents=True)
    with (data / "in.jsonl").open("w") as handle:
        for i in range(records):
            handle.write(json.dumps({"id": i, "sepal_length": 5.1, "sepal_width": 3.5,
                                     "petal_length": 1.4, "petal_width": 0.2}) + "\n")  # fmt: skip
    config = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": name},
        "spec": {
            "model": {"protocol": "kserve-v1", "url": model.http_url, "name": model.model},
            "storage": {
                "input": {"file": {"path": str(data / "in.jsonl"), "idField": "id"}},
                "output": {"file": {"path": str(data / "out")}},
            },
            "runner": {"batchSize": 1, "concurrency": 1, "chunkSize": 1},
            "pod": {"resources": {"requests": {"cpu": "1", "memory": "256Mi"}}},
        },
    }
    run = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": name},
        "spec": {"configRef": {"name": name}, "queueName": "team-a"},
    }
    return [config, run]


def first_record(out: Path, *, timeout: float = 120.0) -> float:
    """The mtime of the first chunk file written under `out` (polled every 5 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            parts = list(out.glob("part-*"))
            if parts:
                return min(p.stat().st_mtime_ns for p in parts) / 1e9
        time.sleep(0.005)
    raise TimeoutError(f"no chunk under {out} within {timeout}s")


def wait_phase(system: System, ns: str, name: str, phase: str, *, timeout: float) -> None:
    def reached() -> bool:
        run = system.get("inferencerun", name, ns) or {}
        return bool((run.get("status") or {}).get("phase") == phase)

    eventually(reached, timeout=timeout)


def apply(system: System, ns: str, objs: list[Obj]) -> None:
    import yaml

    system.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump_all(objs))


def measure(system: System, model: PeerServer, tmp: Path, runs: int) -> list[tuple[float, ...]]:
    """Each run's seconds from its Job's un-suspension to its pod, its start, its first record."""
    ns = system.namespace("bench")
    system.kubectl("apply", "-n", ns, "-f", str(QUEUES))
    stamps, stop = Stamps(), threading.Event()
    watch(system, ns, stamps, stop)
    rows: list[tuple[float, ...]] = []
    for i in range(runs):
        blocker, name = f"blocker-{i}", f"measured-{i}"
        apply(system, ns, objects(model, tmp / blocker, name=blocker, records=100_000))
        wait_phase(system, ns, blocker, "Running", timeout=120)
        apply(system, ns, objects(model, tmp / name, name=name, records=200))
        wait_phase(system, ns, name, "Queued", timeout=60)
        system.kubectl("delete", "inferencerun", blocker, "-n", ns, "--wait=false")
        written = first_record(tmp / name / "out")
        wait_phase(system, ns, name, "Succeeded", timeout=120)
        resumed = stamps.resumed[name]
        rows.append(
            (
                stamps.pod_created[name] - resumed,
                stamps.pod_running[name] - resumed,
                written - resumed,
            )
        )
        print(f"run {i}: " + "  ".join(f"{v:6.2f}" for v in rows[-1]), flush=True)
    stop.set()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    try:
        assets, kueue = find_assets(), find_kueue()
    except (AssetsNotFound, KueueNotFound) as exc:
        raise SystemExit(str(exc)) from None
    print(
        f"Kueue v{kueue.version} on kube-apiserver v{assets.version}; {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("seconds after Kueue un-suspends the Job: pod created, pod running, first record")
    with (
        tempfile.TemporaryDirectory(prefix="longrun-kueue-bench-") as name,
        start("kserve") as model,
    ):
        tmp = Path(name)
        managers: list[KueueManager] = []
        system = System(
            tmp / "system",
            backend="real",
            before_controller=lambda s: managers.append(KueueManager(kueue, s.plane).start()),
        )
        system.start()
        try:
            print(f"(Kueue ready {managers[0].started_in:.1f} s after its start began)")
            rows = measure(system, model, tmp, args.runs)
        finally:
            system.stop()
    for label, index in (("pod created", 0), ("pod running", 1), ("first record", 2)):
        values = sorted(r[index] for r in rows)
        print(f"{label:13} median {values[len(values) // 2]:5.2f} s, max {values[-1]:5.2f} s")
    print("target: first record <= 2 s after the un-suspension (issue #28)")


if __name__ == "__main__":
    main()
