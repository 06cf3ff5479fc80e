"""Crashes, failover, API faults and broken watches, on either backend (faults: the emulator).

Real: the backend (Lease objects, the Job controller), the node agent, the official
client's informers and leader election, the controller; on the emulator only, its 409/500
fault injection, dropped watches and 410 Gone. Faked: what pods do (scripted); a
controller "crash" is simulated by making every request of one Manager fail after its
N-th write and then stopping it.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.core.ports import ApiError
from controller.runtime.manager import Manager
from e2e.fixtures import eventually
from tests.controller.emulated.harness import SUMMARY, Env

WRITES = ("POST", "PATCH", "PUT", "DELETE")


def _crash_after(manager: Manager, writes: int) -> list[int]:
    """Make `manager` behave as if killed after `writes` writes; returns the write counter."""
    done = [0]
    request = manager.transport.request

    def crashing(method: str, path: str, **kwargs: Any) -> Any:
        if done[0] >= writes:
            raise ApiError(0, "controller killed")
        if method in WRITES:
            done[0] += 1
        return request(method, path, **kwargs)

    manager.transport.request = crashing  # type: ignore[method-assign]
    return done


def _owned_by(objs: list[dict[str, Any]], run: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["metadata"].get("annotations", {}).get("longrun.dev/run") == run]


def test_killed_between_any_two_writes_converges_without_duplicates(env: Env) -> None:
    env.scripted.script(exit_code=0, message=SUMMARY, duration=0.2)
    env.create_config()
    for writes in range(6):
        name = f"run-{writes}"
        first = env.start()
        counter = _crash_after(first, writes)
        env.create_run(name)
        eventually(lambda: counter[0] >= writes)  # noqa: B023
        first.stop()
        second = env.start()
        env.wait_phase("Succeeded", name)
        assert len(_owned_by(env.jobs(), name)) == 1
        assert len(_owned_by(env.config_maps(), name)) == 1
        second.stop()


def test_one_leader_and_failover_without_duplicate_jobs(env: Env) -> None:
    env.scripted.script(exit_code=0, message=SUMMARY)
    env.create_config()
    a, b = env.start(leader_election=True), env.start(leader_election=True)
    leader = eventually(lambda: [m for m in (a, b) if m.is_leader], timeout=15)
    assert len(leader) == 1
    env.create_run("first")
    env.wait_phase("Succeeded", "first")
    leader[0].stop()
    follower = b if leader[0] is a else a
    eventually(lambda: follower.is_leader, timeout=20)
    env.create_run("second")
    env.wait_phase("Succeeded", "second")
    assert sorted(j["metadata"]["name"] for j in env.jobs()) == ["first", "second"]


@pytest.mark.emulator_only  # fault injection
def test_status_write_conflicts_and_errors_are_retried_without_losing_fields(env: Env) -> None:
    env.scripted.script(exit_code=0, message=SUMMARY, duration=0.3)
    manager = env.start()
    env.create_config()
    env.emu.faults.fail_next("patch", "inferenceruns/status", status=409, count=3)
    env.emu.faults.fail_next("patch", "inferenceruns/status", status=500, count=3)
    env.create_run()
    status = env.wait_phase("Succeeded", timeout=15)
    assert status["result"]["recordsWritten"] == 9
    assert {c["type"] for c in status["conditions"]} == {
        "Accepted",
        "Running",
        "Complete",
        "Failed",
    }
    assert status["jobName"] == "run" and status["configMapName"] == "run-contract"
    assert 6 <= manager.metrics.reconcile_errors.value() <= 12  # bounded retries


@pytest.mark.emulator_only  # fault injection
def test_dropped_watches_and_410_gone_miss_nothing(env: Env) -> None:
    env.scripted.script(exit_code=0, message=SUMMARY)
    env.start()
    env.create_config()
    env.create_run("before")
    env.wait_phase("Succeeded", "before")
    for resource in ("inferenceruns", "jobs", "pods", "configmaps"):
        env.emu.faults.fail_next("watch", resource, status=410, count=1)
    env.emu.faults.drop_watches()
    env.create_run("during")
    env.emu.restart()  # connections drop again; state survives
    env.create_run("after")
    for name in ("during", "after"):
        # A relist that races the restart is retried by the informer after 5 s.
        env.wait_phase("Succeeded", name, timeout=30)
    assert len(env.jobs()) == 3
