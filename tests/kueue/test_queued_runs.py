"""Runs queued by the real Kueue: wait for quota, admitted in turn, preempted and resumed.

Real: kube-apiserver, etcd and kube-controller-manager (e2e/real), Kueue's manager
(e2e/kueue: its CRDs, its webhooks on 127.0.0.1, its job and workload controllers, its
scheduler and preemption), the queue set-up of testdata/kueue/queues.yaml as shipped, the
example testdata/examples/queued as shipped but for what only a cluster has (the model's
service name, the data volume's paths, the namespace), `longrun controller` as a process,
the node agent running each pod as the real runner, KServe's model server (e2e/peers),
kubectl for every user action, the JSONL output read back at the end. Faked: nothing.

Skips with one line naming KUEUE_ASSETS where Kueue's manager is not built (also in CI), and
with one naming KUBEBUILDER_ASSETS where the control plane is not. Collected only in the
real-backend pass (tests/kueue/conftest.py).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e.fixtures import eventually
from e2e.kueue.fixtures import QueuedSystem
from e2e.peers.server import PeerServer
from e2e.system import System
from tests.e2e.conftest import apply, example
from tests.e2e.test_examples import diagnose
from tests.e2e.test_lifecycle import output_ids
from tests.iris import iris_rows
from tests.support import REPO_ROOT

QUEUES = REPO_ROOT / "testdata" / "kueue" / "queues.yaml"
CONTROLLER = {"ALLOWED_WORKLOAD_PRIORITY_CLASSES": "batch-*", "PROGRESS_INTERVAL": "1s"}
TIMEOUT = 240.0
Obj = dict[str, Any]


def queued_run(
    model: PeerServer, data: Path, *, name: str, records: int, priority: str
) -> list[Obj]:
    """The queued example as a run of `records` flowers in `data`, at `priority`."""
    config, run = copy.deepcopy(example("queued"))
    data.mkdir(parents=True)
    flowers = iris_rows()
    with (data / "flowers.jsonl").open("w") as handle:
        for i in range(records):
            row = {k: v for k, v in flowers[i % 150].items() if k not in ("id", "species")}
            handle.write(json.dumps({"id": i, **row}) + "\n")
    config["metadata"]["name"] = run["spec"]["configRef"]["name"] = name
    spec = config["spec"]
    spec["model"].update(url=model.http_url, name=model.model)
    spec["storage"]["input"]["file"].update(path=str(data / "flowers.jsonl"), mountPath=str(data))
    spec["storage"]["output"]["file"].update(path=str(data / "scores"), mountPath=str(data))
    spec["runner"].update(batchSize=1, concurrency=1, chunkSize=100, progressIntervalSeconds=1)
    run["metadata"]["name"] = name
    run["spec"]["workloadPriorityClassName"] = priority
    return [config, run]


def status_of(system: System, ns: str, name: str) -> Obj:
    return dict(((system.get("inferencerun", name, ns) or {}).get("status")) or {})


def condition(status: Obj, type_: str) -> Obj:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def wait_for(system: System, ns: str, check: Callable[[], Any], what: str) -> Any:
    try:
        return eventually(check, timeout=TIMEOUT, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{what}: {exc}\n{diagnose(system, ns)}") from None


def wait_phase(system: System, ns: str, name: str, phase: str) -> Obj:
    def reached() -> Obj | None:
        status = status_of(system, ns, name)
        assert status.get("phase") != "Failed", status
        return status if status.get("phase") == phase else None

    return dict(wait_for(system, ns, reached, f"{name} {phase}"))


def chunks(data: Path) -> int:
    return len(list((data / "scores").glob("part-*.jsonl")))


def exactly_once(data: Path, records: int) -> None:
    ids = output_ids(data / "scores")
    assert len(ids) == records and sorted(ids) == list(range(records))


def test_runs_wait_for_quota_and_a_preempted_run_resumes_exactly_once(
    start_queued_system: Callable[..., QueuedSystem], kserve_server: PeerServer, tmp_path: Path
) -> None:
    system, _kueue = start_queued_system(**CONTROLLER)
    ns = system.namespace("queued")
    system.kubectl("apply", "-n", ns, "-f", str(QUEUES))
    sizes = {"first": 2000, "second": 8000, "urgent": 1000}
    data = {name: tmp_path / name for name in sizes}

    # Two runs, quota for one: the second waits, Queued with Kueue's reason.
    for name in ("first", "second"):
        run = queued_run(
            kserve_server, data[name], name=name, records=sizes[name], priority="batch-low"
        )
        apply(system, ns, run)
    wait_phase(system, ns, "first", "Running")

    def waits_for_quota() -> Obj | None:
        status = status_of(system, ns, "second")
        return status if condition(status, "Queued").get("reason") == "Pending" else None

    waiting = wait_for(system, ns, waits_for_quota, "second waits for quota")
    assert waiting["phase"] == "Queued"
    queued = condition(waiting, "Queued")
    assert queued["status"] == "True", queued
    assert "insufficient unused quota for cpu" in queued["message"], queued
    assert "insufficient unused quota for cpu" in waiting["message"]
    second_job = system.get("job", waiting["jobName"], ns) or {}
    assert second_job["spec"]["suspend"] is True

    # The first finishes; the second is admitted and runs.
    wait_phase(system, ns, "first", "Succeeded")
    exactly_once(data["first"], sizes["first"])
    wait_phase(system, ns, "second", "Running")
    assert condition(status_of(system, ns, "second"), "Queued")["reason"] == "Admitted"

    # A higher-priority run preempts it once it has committed some chunks...
    wait_for(system, ns, lambda: chunks(data["second"]) >= 3, "second commits chunks")
    urgent = queued_run(kserve_server, data["urgent"], name="urgent", records=sizes["urgent"],
                        priority="batch-high")  # fmt: skip
    apply(system, ns, urgent)
    preempted = wait_phase(system, ns, "second", "Queued")
    assert condition(preempted, "Queued")["reason"] == "Preempted", preempted
    assert condition(preempted, "Preempted")["status"] == "True", preempted
    committed_at_preemption = chunks(data["second"])
    assert committed_at_preemption < sizes["second"] // 100, "finished before the preemption"
    wait_phase(system, ns, "urgent", "Succeeded")
    exactly_once(data["urgent"], sizes["urgent"])

    # ... and it is admitted again, resumes after its committed chunks, and finishes.
    done = wait_phase(system, ns, "second", "Succeeded")
    exactly_once(data["second"], sizes["second"])
    assert done["result"]["recordsWritten"] == sizes["second"]  # whole-run counts
    assert condition(done, "Preempted")["reason"] == "Readmitted"
    job = system.get("job", done["jobName"], ns) or {}
    conditions = {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}
    assert conditions.get("Complete") == "True" and conditions.get("Failed") != "True"
    runs = [e for e in system.items("events", ns) if e["involvedObject"]["kind"] == "InferenceRun"]
    events = {(e["involvedObject"]["name"], e["reason"]) for e in runs}
    assert {("second", "Queued"), ("second", "Preempted"), ("second", "Succeeded")} <= events
    assert not {reason for _, reason in events} & {"Suspended", "Resumed"}  # no run was
    said = [e["message"] for e in runs if e["involvedObject"]["name"] == "second"]
    assert any("insufficient unused quota for cpu" in m for m in said), said
    workloads = yaml.safe_load(system.kubectl("get", "workloads", "-n", ns, "-o", "yaml"))
    assert {w["metadata"]["name"] for w in workloads["items"]} >= {done["workloadName"]}


def workload_of(system: System, ns: str, status: Obj) -> Obj:
    found = system.get("workload", status["workloadName"], ns)
    assert found is not None, status
    return found


def test_suspend_resume_and_cancel_go_through_the_workload_kueue_respects(
    start_queued_system: Callable[..., QueuedSystem], kserve_server: PeerServer, tmp_path: Path
) -> None:
    system, _kueue = start_queued_system(**CONTROLLER)
    ns = system.namespace("control")
    system.kubectl("apply", "-n", ns, "-f", str(QUEUES))
    pause, never = tmp_path / "pause", tmp_path / "never"
    apply(system, ns, queued_run(kserve_server, pause, name="pause", records=6000,
                                 priority="batch-low"))  # fmt: skip
    wait_phase(system, ns, "pause", "Running")
    apply(system, ns, queued_run(kserve_server, never, name="never", records=100,
                                 priority="batch-low"))  # fmt: skip
    wait_phase(system, ns, "never", "Queued")

    # Cancelling a run that waits in the queue: its Workload is deactivated, it never runs.
    patch = json.dumps({"spec": {"cancel": True}})
    system.kubectl("patch", "irun", "never", "-n", ns, "--type", "merge", "-p", patch)
    wait_phase(system, ns, "never", "Cancelled")
    cancelled = status_of(system, ns, "never")
    assert workload_of(system, ns, cancelled)["spec"]["active"] is False
    assert not (never / "scores").exists() or chunks(never) == 0

    # Suspending a running one: Kueue evicts the deactivated Workload and suspends the Job.
    wait_for(system, ns, lambda: chunks(pause) >= 2, "pause commits chunks")
    patch = json.dumps({"spec": {"suspend": True}})
    system.kubectl("patch", "irun", "pause", "-n", ns, "--type", "merge", "-p", patch)
    suspended = wait_phase(system, ns, "pause", "Suspended")
    workload = workload_of(system, ns, suspended)
    assert workload["spec"]["active"] is False
    assert workload["metadata"]["annotations"]["longrun.dev/deactivated"] == "true"
    evicted = next(c for c in workload["status"]["conditions"] if c["type"] == "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "Deactivated")
    job = system.get("job", suspended["jobName"], ns) or {}
    assert job["spec"]["suspend"] is True
    paused_at = chunks(pause)
    assert paused_at < 60, "finished before the suspension: make the input bigger"

    # Resuming re-activates it: Kueue admits it again and it resumes after its chunks.
    patch = json.dumps({"spec": {"suspend": False}})
    system.kubectl("patch", "irun", "pause", "-n", ns, "--type", "merge", "-p", patch)
    done = wait_phase(system, ns, "pause", "Succeeded")
    exactly_once(pause, 6000)
    assert done["result"]["recordsWritten"] == 6000
    assert "longrun.dev/deactivated" not in (workload_of(system, ns, done)["metadata"].get(
        "annotations") or {})  # fmt: skip


def test_a_run_across_three_pods_is_admitted_as_one_workload_and_writes_every_record_once(
    start_queued_system: Callable[..., QueuedSystem], kserve_server: PeerServer, tmp_path: Path
) -> None:
    system, _kueue = start_queued_system(**CONTROLLER)
    ns = system.namespace("sharded")
    system.kubectl("apply", "-n", ns, "-f", str(QUEUES))
    records, data = 3000, tmp_path / "wide"
    config, run = queued_run(kserve_server, data, name="wide", records=records,
                             priority="batch-low")  # fmt: skip
    # Three pods of 300m fit the queue's one CPU together: admitted whole, or not at all.
    config["spec"]["pod"]["resources"]["requests"]["cpu"] = "300m"
    run["spec"]["parallelism"] = 3
    apply(system, ns, [config, run])
    done = wait_phase(system, ns, "wide", "Succeeded")
    exactly_once(data, records)
    assert done["result"]["recordsWritten"] == records  # the three pods' summaries added up
    manifest = json.loads((data / "scores" / "_SUCCESS").read_text())
    assert (manifest["recordsWritten"], manifest["chunks"]) == (records, records // 100)
    workload = workload_of(system, ns, done)
    pod_sets = workload["spec"]["podSets"]
    assert [p["count"] for p in pod_sets] == [3], pod_sets
    assigned = workload["status"]["admission"]["podSetAssignments"]
    assert [a["count"] for a in assigned] == [3], assigned
    job = system.get("job", done["jobName"], ns) or {}
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 3
    assert job["status"].get("completedIndexes") == "0-2"
