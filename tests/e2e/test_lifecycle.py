"""Whole-system lifecycles: schedule ticks, a runner killed mid-run, a run deleted mid-run.

Real: the backend's Job controller replacing failed pods and its garbage collector (the
emulator's, or kube-controller-manager's with LONGRUN_KUBE_BACKEND=real), the node agent
running the real runner as the pods' processes, `longrun controller` as a process, kubectl,
KServe's model server, PostgreSQL, local files. The schedule test runs on the emulator
only: its CronJob controller ticks on an injectable clock.
Injected: the clock ticks, and a SIGKILL of the runner process (as an OOM kill would do).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from e2e.fixtures import eventually
from e2e.peers.server import PeerServer
from e2e.system import System, runner_pids
from tests.e2e.conftest import apply, example, find
from tests.e2e.test_examples import diagnose, wait_phase
from tests.iris import iris_rows, seed_iris, sql_rows

Obj = dict[str, Any]


def file_run(*, model: PeerServer, data: Path, records: int, name: str) -> list[Obj]:
    """A KServe v1 run over `records` iris rows in a JSONL file, one record per request."""
    flowers = iris_rows()
    with (data / "in.jsonl").open("w") as handle:
        for i in range(records):
            row = {k: v for k, v in flowers[i % 150].items() if k not in ("id", "species")}
            handle.write(json.dumps({"id": i, **row}) + "\n")
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
            "backoffLimit": 3,
            "runner": {"batchSize": 1, "concurrency": 1, "chunkSize": 100},
        },
    }
    run = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": name},
        "spec": {"configRef": {"name": name}, "timeoutSeconds": 600},
    }
    return [config, run]


def output_ids(out: Path) -> list[int]:
    """Record ids of every line of every committed chunk file."""
    return [
        int(json.loads(line)["id"])
        for part in sorted(out.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]


def run_uid(system: System, ns: str, name: str) -> str:
    run = system.get("inferencerun", name, ns)
    assert run is not None
    return str(run["metadata"]["uid"])


def test_runner_killed_mid_run_is_replaced_by_the_job_and_resumes_exactly_once(
    system: System, kserve_server: PeerServer, tmp_path: Path
) -> None:
    records = 6000  # ~60 chunks: the kill after the 2nd lands long before the last
    ns = system.namespace("killed")
    apply(system, ns, file_run(model=kserve_server, data=tmp_path, records=records, name="kill"))
    uid = run_uid(system, ns, "kill")
    eventually(lambda: len(list((tmp_path / "out").glob("part-*.jsonl"))) >= 2, timeout=60)
    pids = eventually(lambda: runner_pids(uid), timeout=10)

    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    status = wait_phase(system, ns, "kill", "Succeeded")

    ids = output_ids(tmp_path / "out")
    assert len(ids) == records and sorted(ids) == list(range(records))
    job = system.get("job", status["jobName"], ns)
    assert job is not None
    assert (job["status"].get("failed"), job["status"].get("succeeded")) == (1, 1)
    assert len(system.items("pods", ns, f"job-name={status['jobName']}")) == 2


def test_deleting_a_running_run_stops_its_runner_and_leaves_nothing_behind(
    system: System, kserve_server: PeerServer, tmp_path: Path
) -> None:
    ns = system.namespace("deleted")
    apply(system, ns, file_run(model=kserve_server, data=tmp_path, records=200_000, name="del"))
    uid = run_uid(system, ns, "del")
    status = wait_phase(system, ns, "del", "Running")
    eventually(lambda: runner_pids(uid), timeout=30)

    system.kubectl("delete", "inferencerun", "del", "-n", ns)

    eventually(lambda: not runner_pids(uid), timeout=45)
    eventually(
        lambda: (
            not system.items("jobs", ns)
            and not system.items("pods", ns)
            and system.get("configmap", status["configMapName"], ns) is None
        ),
        timeout=45,
    )
    assert len(output_ids(tmp_path / "out")) < 200_000  # stopped, not finished


def next_tick(schedule: str, zone: str, after: datetime) -> datetime:
    """The next time `schedule` fires in time zone `zone` after `after` (UTC)."""
    local = after.astimezone(ZoneInfo(zone))
    return croniter(schedule, local).get_next(datetime).astimezone(UTC)  # type: ignore[no-any-return]


@pytest.mark.emulator_only  # the emulator's clock moves through three nightly ticks
def test_scheduled_example_runs_three_ticks_with_outputs_history_and_job_cleanup(
    start_system: Callable[..., System],
    kserve_server: PeerServer,
    postgres_url: str,
    table_prefix: str,
) -> None:
    # The emulator's clock starts days ago, so advancing it through three nightly ticks never
    # stamps an object later than the controller's wall clock.
    begin = (datetime.now(UTC) - timedelta(days=5)).replace(hour=0, minute=0, second=0)
    system = start_system(clock_start=begin)
    objects = [find(example("iris-sql"), "Secret"), *example("scheduled")]
    find(objects, "Secret")["stringData"]["url"] = postgres_url
    spec = find(objects, "InferenceConfig")["spec"]
    spec["model"].update(url=kserve_server.http_url, name=kserve_server.model)
    spec["storage"]["input"]["sql"]["query"] = (
        f"SELECT * FROM {table_prefix}_in WHERE batch = :batch"
    )
    spec["storage"]["output"]["sql"]["table"] = f"{table_prefix}_out"
    seed_iris(postgres_url, f"{table_prefix}_in", [{**r, "batch": "nightly"} for r in iris_rows()])
    run = find(objects, "InferenceRun")
    ns = system.namespace("nightly")

    apply(system, ns, objects)
    wait_phase(system, ns, "nightly-iris", "Scheduled")
    for executions in (1, 2, 3):
        tick = next_tick(run["spec"]["schedule"], run["spec"]["timeZone"], system.clock.now())
        system.clock.advance_to(tick + timedelta(seconds=20))
        try:
            history = eventually(
                lambda n=executions: _succeeded_history(system, ns, n), timeout=120, interval=0.5
            )
        except AssertionError as exc:
            cron = system.items("cronjobs", ns)
            run_status = (system.get("inferencerun", "nightly-iris", ns) or {}).get("status")
            jobs = [(j["metadata"]["name"], j.get("status")) for j in system.items("jobs", ns)]
            raise AssertionError(
                f"execution {executions} at {tick}: {exc}\nrun: {run_status}\njobs: {jobs}\n"
                f"cronjob: {[c.get('status') for c in cron]}\n{diagnose(system, ns)}"
            ) from None

    assert [e["result"]["recordsWritten"] for e in history] == [150, 150, 150]
    rows = sql_rows(postgres_url, f"{table_prefix}_out")
    per_job: dict[str, int] = {}
    for row in rows:
        per_job[row["job_name"]] = per_job.get(row["job_name"], 0) + 1
    assert sorted(per_job) == sorted(e["jobName"] for e in history)
    assert list(per_job.values()) == [150, 150, 150]
    # DeleteOnSuccess on a scheduled run: the finished Jobs go, the CronJob and the run stay.
    eventually(lambda: not system.items("jobs", ns), timeout=30)
    status = (system.get("inferencerun", "nightly-iris", ns) or {})["status"]
    assert status["phase"] == "Scheduled" and system.get("cronjob", status["cronJobName"], ns)
    assert status["lastScheduleTime"] and status["nextScheduleTime"]
    events = system.items("events", ns)
    assert sum(e.get("reason") == "ExecutionSucceeded" for e in events) >= 3


def _succeeded_history(system: System, ns: str, count: int) -> list[Obj] | None:
    run = system.get("inferencerun", "nightly-iris", ns) or {}
    history = (run.get("status") or {}).get("history") or []
    done = [e for e in history if e.get("phase") == "Succeeded" and e.get("result")]
    assert not any(e.get("phase") == "Failed" for e in history), history
    return done if len(done) >= count else None
