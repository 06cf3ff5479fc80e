"""Cron expressions: exactly what Kubernetes' CronJob parser accepts. Nothing is faked.

The API server parses schedules with robfig/cron's standard parser; croniter (which
computes next times) is more permissive, so the extra rules live in controller/validation.
"""

from __future__ import annotations

import pytest

from controller.core.validation import schedule_problem

ACCEPTED = [
    "*/5 * * * *",
    "30 2 * * *",
    "0 0 ? * MON",
    "0 2 * JUL WED",
    "0 0 * jan-mar sun-sat",
    "0,15,30,45 8-18/2 1,15 * *",
    "0 0 * * 0",
    "@daily",
]
REFUSED = [
    "0 0 L * *",  # last day of month: croniter only
    "0 0 LW * *",
    "0 0 1W * *",
    "0 0 * * 5#3",
    "0 0 * * 5L",
    "H * * * *",
    "0 0 * * 7",  # Sunday is 0 for Kubernetes
    "0 0 * * 1-7",
    "60 * * * *",
    "0 24 * * *",
    "0 0 0 * *",
    "*/0 * * * *",
    "0 0 2 * * *",  # six fields
    "TZ=UTC 0 0 * * *",
]


@pytest.mark.parametrize("schedule", ACCEPTED)
def test_accepts_what_kubernetes_accepts(schedule: str) -> None:
    assert schedule_problem(schedule) is None


@pytest.mark.parametrize("schedule", REFUSED)
def test_refuses_what_the_api_server_would_refuse(schedule: str) -> None:
    assert schedule_problem(schedule) is not None
