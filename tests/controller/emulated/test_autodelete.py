"""autoDeletePolicy: 3 policies x succeeded/failed x one-shot/scheduled, on either backend.

Real: the backend's garbage collector (Background propagation removes Jobs, Pods and
the ConfigMap of a deleted run), Job and CronJob controllers, the node agent, the
controller. Faked: pod outcomes (scripted exit codes) and, for scheduled runs, time
(the emulator's clock; those tests are emulator_only).
"""

from __future__ import annotations

import pytest

from e2e.fixtures import eventually
from tests.controller.emulated.harness import SUMMARY, Env

GC_WAIT = 60.0
POLICIES = ["None", "DeleteOnCompletion", "DeleteOnSuccess"]
DELETES = {
    ("None", True): False,
    ("None", False): False,
    ("DeleteOnCompletion", True): True,
    ("DeleteOnCompletion", False): True,
    ("DeleteOnSuccess", True): True,
    ("DeleteOnSuccess", False): False,
}


def _script(env: Env, *, succeed: bool) -> None:
    env.scripted.script(exit_code=0 if succeed else 4, message=SUMMARY)


@pytest.mark.parametrize("succeed", [True, False], ids=["succeeded", "failed"])
@pytest.mark.parametrize("policy", POLICIES)
def test_one_shot_policy(env: Env, policy: str, succeed: bool) -> None:
    _script(env, succeed=succeed)
    env.start()
    env.create_config(autoDeletePolicy=policy, backoffLimit=0)
    env.create_run()
    if DELETES[(policy, succeed)]:
        eventually(lambda: env.run() is None, timeout=10)
        # kube-controller-manager's garbage collector knows a CRD installed moments ago only
        # after its next discovery (up to 30 s); the emulator's knows it at once.
        eventually(
            lambda: not env.jobs() and not env.pods() and not env.config_maps(), timeout=GC_WAIT
        )
    else:
        env.wait_phase("Succeeded" if succeed else "Failed")
        env.settle()
        assert env.run() is not None and len(env.jobs()) == 1  # never re-created, never re-run


@pytest.mark.emulator_only  # the emulator's clock moves to the next minute's tick
@pytest.mark.parametrize("succeed", [True, False], ids=["succeeded", "failed"])
@pytest.mark.parametrize("policy", POLICIES)
def test_scheduled_policy_applies_to_finished_jobs(env: Env, policy: str, succeed: bool) -> None:
    _script(env, succeed=succeed)
    env.start()
    env.create_config(autoDeletePolicy=policy, backoffLimit=0)
    env.create_run(schedule="* * * * *")
    env.wait_phase("Scheduled")
    env.next_minute()
    phase = "Succeeded" if succeed else "Failed"
    # The tick's Job runs a scripted pod (a Python process): the first test of a busy CI
    # machine took over 5 s from the tick to the recorded history.
    eventually(lambda: [e["phase"] for e in env.status().get("history", [])] == [phase], timeout=30)
    if DELETES[(policy, succeed)]:
        eventually(lambda: env.jobs() == [], timeout=10)
    else:
        env.emu.emulator.wait_idle()
        assert len(env.jobs()) == 1
    assert len(env.cron_jobs()) == 1 and env.run() is not None  # the schedule stays
    assert env.status()["history"][0]["phase"] == phase  # history outlives the Job


def test_delay_lets_users_read_the_final_status_first(env: Env) -> None:
    _script(env, succeed=True)
    env.start()
    env.create_config(autoDeletePolicy="DeleteOnCompletion", autoDeleteDelaySeconds=2)
    env.create_run()
    status = env.wait_phase("Succeeded")
    assert status["result"]["recordsRead"] == 10
    eventually(lambda: env.run() is None, timeout=30)
