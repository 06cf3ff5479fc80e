"""Scheduled runs, on either backend; the ticks themselves on the emulator's clock.

Real: the backend's CronJob controller (Forbid, suspend, history limits, the
scheduled-timestamp annotation), Job controller and GC, the node agent; the whole
controller. Faked: what pods do (scripted; held pods finish when the test says so) and,
in the emulator_only tests, time (the test advances the emulator's clock instead of
waiting for minutes).
"""

from __future__ import annotations

import json

import pytest

from e2e.fixtures import eventually
from tests.controller.emulated.harness import SUMMARY, Env


def _running_pods(env: Env) -> list[str]:
    return [p["metadata"]["name"] for p in env.pods() if p["status"].get("phase") == "Running"]


@pytest.mark.emulator_only  # the emulator's clock moves from tick to tick
def test_ticks_with_forbid_skip_while_running_and_record_history(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config()
    env.create_run(schedule="* * * * *")
    status = env.wait_phase("Scheduled")
    assert status["cronJobName"] == "run" and status["nextScheduleTime"]
    env.next_minute()
    pod = eventually(lambda: _running_pods(env) and _running_pods(env)[0])
    env.next_minute()  # Forbid: the next tick is skipped while one runs
    env.emu.emulator.wait_idle()
    assert len(env.jobs()) == 1
    env.scripted.finish(pod, exit_code=0, message=SUMMARY)
    # The tick skipped under Forbid is still due: it starts as soon as the first Job ends.
    eventually(lambda: len(env.jobs()) == 2)
    status = eventually(lambda: len(env.status().get("history", [])) == 2 and env.status())
    assert [e["phase"] for e in status["history"]][1] == "Succeeded"
    assert status["phase"] == "Scheduled"
    assert status["lastScheduleTime"] and status["nextScheduleTime"] > status["lastScheduleTime"]
    assert status["result"]["recordsWritten"] == 9
    assert env.condition("Running")["status"] == "True"


@pytest.mark.emulator_only  # the emulator's clock moves from tick to tick
def test_suspend_pauses_and_resume_continues(env: Env) -> None:
    env.start()
    env.create_config()
    env.create_run(schedule="* * * * *")
    env.wait_phase("Scheduled")
    env.patch_run("run", {"spec": {"suspend": True}})
    env.wait_phase("Suspended")
    eventually(lambda: env.cron_jobs()[0]["spec"]["suspend"] is True)
    assert "nextScheduleTime" not in env.status()
    env.emu.clock.advance(180)
    env.emu.emulator.wait_idle()
    assert env.jobs() == []
    env.patch_run("run", {"spec": {"suspend": False}})
    env.wait_phase("Scheduled")
    env.next_minute()  # (a tick missed while suspended may also start: Kubernetes' rule)
    eventually(lambda: len(env.jobs()) >= 1)


def test_schedule_and_parameter_changes_update_cronjob_and_contract(env: Env) -> None:
    env.start()
    env.create_config()
    env.create_run(schedule="* * * * *", parameters={"day": "mon"})
    env.wait_phase("Scheduled")
    env.patch_run("run", {"spec": {"schedule": "*/5 * * * *", "parameters": {"day": "tue"}}})
    eventually(lambda: env.cron_jobs()[0]["spec"]["schedule"] == "*/5 * * * *")
    contract = eventually(
        lambda: json.loads(env.config_map("run-contract")["data"]["contract.json"])
    )
    eventually(
        lambda: (
            json.loads(env.config_map("run-contract")["data"]["contract.json"])["parameters"]
            == {"day": "tue"}
        )
    )
    assert contract["run"]["scheduled"] is True
    assert len(env.cron_jobs()) == 1


def test_config_change_updates_scheduled_contract(env: Env) -> None:
    env.start()
    env.create_config()
    env.create_run(schedule="@hourly")
    env.wait_phase("Scheduled")
    env.patch_config("cfg", {"spec": {"runner": {"batchSize": 7}}})

    def batch_size() -> int:
        return int(
            json.loads(env.config_map("run-contract")["data"]["contract.json"])["runner"][
                "batchSize"
            ]
        )

    eventually(lambda: batch_size() == 7)


def test_invalid_schedule_is_a_user_error(env: Env) -> None:
    env.start()
    env.create_config()
    env.create_run(schedule="61 * * * *")
    eventually(lambda: env.condition("Accepted").get("reason") == "InvalidSchedule")
    assert env.cron_jobs() == []
