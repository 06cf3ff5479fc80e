"""The runner pod's metrics port, and the Job's podFailurePolicy as the Job controller reads it.

Real: the pure builders, and the emulator's podFailurePolicy matcher (e2e/emulator/jobpods.py,
checked against the real Job controller by the fidelity suite) for how rules are applied.
Faked: the terminated pods are plain dicts shaped as the kubelet reports them.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.core import builders, runnerpod
from controller.core.settings import Settings
from e2e.emulator.jobpods import pod_failure_action
from tests.controller.unit.objects import resolved

SETTINGS = Settings(default_runner_image="ghcr.io/longrun/runner:default")


def runner_container(manifest: dict[str, Any]) -> dict[str, Any]:
    (container,) = manifest["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_runner_container_declares_the_metrics_port_and_tells_the_runner_its_number() -> None:
    container = runner_container(builders.build_job(resolved(), SETTINGS)["spec"])
    assert container["ports"] == [{"name": "metrics", "containerPort": 9095, "protocol": "TCP"}]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LONGRUN_METRICS_PORT"] == "9095"


def test_scheduled_runs_get_the_same_port_and_failure_policy() -> None:
    cron = builders.build_cron_job(resolved({"schedule": "*/5 * * * *"}), SETTINGS)
    job_spec = cron["spec"]["jobTemplate"]["spec"]
    assert runner_container(job_spec)["ports"][0]["name"] == runnerpod.METRICS_PORT_NAME
    assert job_spec["podFailurePolicy"] == builders.pod_failure_policy()


def terminated_pod(exit_code: int, *, disrupted: bool = False) -> dict[str, Any]:
    conditions = [{"type": "DisruptionTarget", "status": "True"}] if disrupted else []
    return {
        "metadata": {"namespace": "team", "name": "run-abcde"},
        "status": {
            "phase": "Failed",
            "conditions": conditions,
            "containerStatuses": [
                {"name": "runner", "state": {"terminated": {"exitCode": exit_code}}}
            ],
        },
    }


@pytest.mark.parametrize(
    ("exit_code", "disrupted", "action"),
    [
        (143, False, "Ignore"),  # SIGTERM: the run was suspended, or its pod deleted
        (2, False, "FailJob"),  # bad contract or spent error budget: final
        (2, True, "FailJob"),  # rules apply in order: exit 2 wins over a disruption
        (1, False, "Count"),  # a real failure still counts against backoffLimit
        (4, False, "Count"),
        (137, False, "Count"),  # SIGKILL (out of memory) is no suspension
        (1, True, "Ignore"),  # evicted or preempted
    ],
)
def test_only_a_sigterm_stop_or_a_disruption_costs_no_retry(
    exit_code: int, disrupted: bool, action: str
) -> None:
    job = builders.build_job(resolved(), SETTINGS)
    assert pod_failure_action(job, terminated_pod(exit_code, disrupted=disrupted))[0] == action
