"""Suspend → resume and cancel with the whole system, checked by reading the sink.

Real: the API emulator (its Job controller deletes a suspended Job's pods, which the local pod
executor stops with SIGTERM, and starts a new pod on resume), `longrun controller` as a
process (reading progress through `pods/log`), the real runner as the pods' processes,
kubectl for every user action, KServe's model server, and the file sink read back at the end.
Nothing is injected: the runner resumes after its committed chunks on its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.fixtures import eventually
from e2e.peers.server import PeerServer
from e2e.system import System, runner_pids
from tests.e2e.conftest import apply
from tests.e2e.test_examples import wait_phase
from tests.e2e.test_lifecycle import file_run, output_ids, run_uid

Obj = dict[str, Any]


@pytest.fixture
def system(start_system: Callable[..., System], monkeypatch: pytest.MonkeyPatch) -> System:
    """The whole system, its controller reading progress every second."""
    monkeypatch.setenv("PROGRESS_INTERVAL", "1s")
    return start_system()


def reporting_run(model: PeerServer, data: Path, *, records: int, name: str) -> list[Obj]:
    """`file_run`, its runner reporting progress every second."""
    objects = file_run(model=model, data=data, records=records, name=name)
    objects[0]["spec"]["runner"]["progressIntervalSeconds"] = 1
    return objects


def chunks(out: Path) -> int:
    return len(list(out.glob("part-*.jsonl")))


def progress_of(system: System, ns: str, name: str) -> Obj:
    run = system.get("inferencerun", name, ns) or {}
    return dict((run.get("status") or {}).get("progress") or {})


def patch_spec(system: System, ns: str, name: str, spec: Obj) -> None:
    body = json.dumps({"spec": spec})
    system.kubectl("patch", "inferencerun", name, "-n", ns, "--type", "merge", "-p", body)


def test_a_suspended_then_resumed_run_writes_every_record_exactly_once(
    system: System, kserve_server: PeerServer, tmp_path: Path
) -> None:
    records, out = 6000, tmp_path / "out"
    ns = system.namespace("suspend")
    apply(system, ns, reporting_run(kserve_server, tmp_path, records=records, name="pause"))
    uid = run_uid(system, ns, "pause")
    eventually(lambda: chunks(out) >= 2, timeout=60)
    wait_phase(system, ns, "pause", "Running")
    # The first report may be from before the first chunk: wait for one that counts writes.
    progress = eventually(
        lambda: (
            (p := progress_of(system, ns, "pause")).get("recordsWritten") and p.get("text") and p
        ),
        timeout=30,
    )
    assert progress["recordsWritten"] > 0 and progress["updatedAt"]

    patch_spec(system, ns, "pause", {"suspend": True})
    suspended = wait_phase(system, ns, "pause", "Suspended")
    eventually(lambda: not runner_pids(uid), timeout=45)
    paused_at = chunks(out)
    assert paused_at < records // 100, "suspended after it finished: make the input bigger"
    assert suspended["phase"] == "Suspended"

    def table_shows_the_progress() -> bool:
        # The runner's last report may land after the phase did: compare with the status now.
        text = progress_of(system, ns, "pause").get("text", "")
        table = system.kubectl("get", "irun", "pause", "-n", ns)
        return "Suspended" in table and text in table

    eventually(table_shows_the_progress, timeout=15)

    patch_spec(system, ns, "pause", {"suspend": False})
    status = wait_phase(system, ns, "pause", "Succeeded")

    ids = output_ids(out)
    assert len(ids) == records and sorted(ids) == list(range(records))  # each exactly once
    assert status["result"]["recordsWritten"] == records
    assert status["progress"]["text"] == "6k/6k (100%)"
    # The suspended pod was deleted by the Job controller; the one left resumed and finished.
    assert len(system.items("pods", ns, f"job-name={status['jobName']}")) == 1
    events = {e.get("reason") for e in system.items("events", ns)}
    assert {"Suspended", "Resumed", "Succeeded"} <= events


def test_a_cancelled_run_keeps_its_committed_output_exactly_once(
    system: System, kserve_server: PeerServer, tmp_path: Path
) -> None:
    records, out = 200_000, tmp_path / "out"
    ns = system.namespace("cancel")
    apply(system, ns, reporting_run(kserve_server, tmp_path, records=records, name="stop"))
    uid = run_uid(system, ns, "stop")
    eventually(lambda: chunks(out) >= 3, timeout=60)
    # A progress report first: a run's result is the larger of it and the runner's summary.
    eventually(lambda: progress_of(system, ns, "stop").get("recordsWritten"), timeout=30)

    patch_spec(system, ns, "stop", {"cancel": True})
    status = wait_phase(system, ns, "stop", "Cancelled")
    eventually(lambda: not runner_pids(uid), timeout=45)

    ids = output_ids(out)
    # Chunks commit in order, whole: what was done is a prefix of the input, each record once.
    assert 300 <= len(ids) < records and sorted(ids) == list(range(len(ids)))
    status = (system.get("inferencerun", "stop", ns) or {})["status"]
    assert status["phase"] == "Cancelled"
    result = status["result"]
    # The runner's SIGTERM summary, read from the pod's last state when the Job controller
    # deleted it before the controller's pass: exactly what was committed.
    assert (result["recordsWritten"], result["recordsFailed"]) == (len(ids), 0), result
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Failed"] == "False" and conditions["Complete"] == "False"
    assert chunks(out) == len(ids) // 100  # nothing was written after the runner stopped
    job = system.get("job", status["jobName"], ns)
    assert job is not None and job["spec"]["suspend"] is True

    system.kubectl("delete", "inferencerun", "stop", "-n", ns)
    eventually(lambda: not system.items("jobs", ns) and not system.items("pods", ns), timeout=45)
    assert sorted(output_ids(out)) == list(range(len(ids)))  # deleting the run keeps the output
