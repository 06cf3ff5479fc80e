"""The CronJob controller on an injectable clock: schedules, concurrency, history, time zones.

Real: the official client over HTTP; croniter computes schedules like the real
controller's cron library. Faked: time (the emulator clock is advanced by the
tests, nobody sleeps for a minute) and what pods do (scripted containers, run by
the node agent: e2e/nodeagent/scripted.py).
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

from e2e.fixtures import eventually


def cronjob(name: str = "cj", schedule: str = "*/5 * * * *", **spec: Any) -> dict:
    template = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    }
    return {
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "jobTemplate": {"metadata": {"labels": {"run": name}}, "spec": {"template": template}},
            **spec,
        },
    }


def next_boundary(now: datetime, minutes: int) -> datetime:
    base = now.replace(second=0, microsecond=0)
    return base + timedelta(minutes=minutes - base.minute % minutes)


def advance_past(k8s, minutes: int = 5, extra: float = 1.0) -> datetime:
    at = next_boundary(k8s.emu.clock.now(), minutes)
    k8s.emu.clock.advance_to(at + timedelta(seconds=extra))
    return at


def jobs(k8s) -> list:
    return sorted(k8s.batch.list_namespaced_job(k8s.ns).items, key=lambda j: j.metadata.name)


def test_creates_job_named_by_scheduled_minute_with_annotation(k8s):
    cj = k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob())
    at = advance_past(k8s)
    job = eventually(lambda: jobs(k8s))[0]
    assert job.metadata.name == f"cj-{int(at.timestamp()) // 60}"
    assert job.metadata.annotations[
        "batch.kubernetes.io/cronjob-scheduled-timestamp"
    ] == at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert job.metadata.labels["run"] == "cj"
    ref = job.metadata.owner_references[0]
    assert (ref.kind, ref.uid, ref.controller) == ("CronJob", cj.metadata.uid, True)
    status = eventually(
        lambda: k8s.batch.read_namespaced_cron_job("cj", k8s.ns).status.last_schedule_time
    )
    assert status == at


def test_status_tracks_active_and_last_successful_time(k8s):
    k8s.emu.executor.script(match=lambda p: True, hold=True)
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob())
    advance_past(k8s)
    job = eventually(lambda: k8s.batch.read_namespaced_cron_job("cj", k8s.ns).status.active)[0]
    pod = eventually(lambda: k8s.core.list_namespaced_pod(k8s.ns).items)[0]
    k8s.emu.executor.finish(pod.metadata.name)
    status = eventually(
        lambda: (
            (s := k8s.batch.read_namespaced_cron_job("cj", k8s.ns).status).last_successful_time
            and s
        )
    )
    assert not status.active and job.name.startswith("cj-")


def test_forbid_skips_while_a_job_is_active(k8s):
    k8s.emu.executor.script(match=lambda p: True, hold=True)
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(concurrencyPolicy="Forbid"))
    advance_past(k8s)
    eventually(lambda: jobs(k8s))
    advance_past(k8s)
    k8s.emu.emulator.wait_idle()
    assert len(jobs(k8s)) == 1


def test_allow_runs_jobs_concurrently(k8s):
    k8s.emu.executor.script(match=lambda p: True, hold=True)
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(concurrencyPolicy="Allow"))
    advance_past(k8s)
    eventually(lambda: jobs(k8s))
    advance_past(k8s)
    eventually(lambda: len(jobs(k8s)) == 2)
    eventually(lambda: len(k8s.batch.read_namespaced_cron_job("cj", k8s.ns).status.active) == 2)


def test_replace_deletes_the_active_job(k8s):
    k8s.emu.executor.script(match=lambda p: True, hold=True)
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(concurrencyPolicy="Replace"))
    advance_past(k8s)
    first = eventually(lambda: jobs(k8s))[0].metadata.name
    at = advance_past(k8s)
    second = f"cj-{int(at.timestamp()) // 60}"
    eventually(lambda: [j.metadata.name for j in jobs(k8s)] == [second])
    assert first != second


def test_suspended_cronjob_starts_nothing(k8s):
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(suspend=True))
    advance_past(k8s)
    k8s.emu.emulator.wait_idle()
    assert not jobs(k8s)


def test_missed_start_beyond_starting_deadline_is_skipped(k8s):
    k8s.batch.create_namespaced_cron_job(
        k8s.ns, cronjob(schedule="0 * * * *", startingDeadlineSeconds=10)
    )
    k8s.emu.clock.advance_to(next_boundary(k8s.emu.clock.now(), 60) + timedelta(seconds=30))
    k8s.batch.patch_namespaced_cron_job("cj", k8s.ns, {"metadata": {"labels": {"poke": "1"}}})
    k8s.emu.emulator.wait_idle()
    assert not jobs(k8s)


def test_history_limits_delete_oldest_finished_jobs(k8s):
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(successfulJobsHistoryLimit=1))
    for _ in range(3):
        at = advance_past(k8s)
        name = f"cj-{int(at.timestamp()) // 60}"
        eventually(
            lambda n=name: any(j.metadata.name == n and j.status.succeeded for j in jobs(k8s))
        )
    eventually(lambda: len(jobs(k8s)) == 1)
    assert jobs(k8s)[0].metadata.name == name


def test_time_zone_controls_schedule_and_annotation(k8s):
    tz = zoneinfo.ZoneInfo("Asia/Kolkata")  # UTC+05:30, no DST
    k8s.batch.create_namespaced_cron_job(
        k8s.ns, cronjob(schedule="30 * * * *", timeZone="Asia/Kolkata")
    )
    now = k8s.emu.clock.now().astimezone(tz)
    at = now.replace(minute=30, second=0, microsecond=0) + timedelta(
        hours=1 if now.minute >= 30 else 0
    )
    k8s.emu.clock.advance_to(at.astimezone(UTC) + timedelta(seconds=1))
    job = eventually(lambda: jobs(k8s))[0]
    assert job.metadata.name == f"cj-{int(at.timestamp()) // 60}"
    stamp = job.metadata.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"]
    assert stamp.endswith("+05:30") and stamp.startswith(at.strftime("%Y-%m-%dT%H:30:00"))


def test_invalid_schedule_is_rejected(k8s):
    from kubernetes.client.exceptions import ApiException

    try:
        k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(schedule="not a cron"))
    except ApiException as exc:
        assert exc.status == 422 and "spec.schedule" in exc.body
    else:
        raise AssertionError("expected 422")


def cronjob_events(k8s, reason: str) -> list:
    selector = "involvedObject.kind=CronJob,involvedObject.name=cj"
    return [
        e
        for e in k8s.core.list_namespaced_event(k8s.ns, field_selector=selector).items
        if e.reason == reason
    ]


def test_failed_jobs_history_limit_keeps_newest_failed(k8s):
    k8s.emu.executor.script(match=lambda p: True, exit_code=1)
    body = cronjob(failedJobsHistoryLimit=1)
    body["spec"]["jobTemplate"]["spec"]["backoffLimit"] = 0
    k8s.batch.create_namespaced_cron_job(k8s.ns, body)
    for _ in range(2):
        at = advance_past(k8s)
        name = f"cj-{int(at.timestamp()) // 60}"
        eventually(lambda n=name: any(j.metadata.name == n and j.status.failed for j in jobs(k8s)))
    eventually(lambda: [j.metadata.name for j in jobs(k8s)] == [name])
    assert cronjob_events(k8s, "SuccessfulDelete")


def test_history_is_cleaned_up_while_suspended(k8s):
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob())
    for _ in range(2):
        at = advance_past(k8s)
        name = f"cj-{int(at.timestamp()) // 60}"
        eventually(
            lambda n=name: any(j.metadata.name == n and j.status.succeeded for j in jobs(k8s))
        )
    k8s.emu.emulator.wait_idle()
    patch = {"spec": {"suspend": True, "successfulJobsHistoryLimit": 0}}
    k8s.batch.patch_namespaced_cron_job("cj", k8s.ns, patch)
    eventually(lambda: not jobs(k8s))


def test_late_start_inside_starting_deadline_creates_the_job(k8s):
    k8s.batch.create_namespaced_cron_job(
        k8s.ns, cronjob(schedule="0 * * * *", startingDeadlineSeconds=100)
    )
    at = next_boundary(k8s.emu.clock.now(), 60)
    k8s.emu.clock.advance_to(at + timedelta(seconds=30))
    job = eventually(lambda: jobs(k8s))[0]
    assert job.metadata.name == f"cj-{int(at.timestamp()) // 60}"


def test_forbid_starts_the_skipped_schedule_late_once_the_active_job_ends(k8s):
    k8s.emu.executor.script(match=lambda p: True, hold=True)
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(concurrencyPolicy="Forbid"))
    advance_past(k8s)
    first = eventually(lambda: jobs(k8s))[0].metadata.name
    skipped = advance_past(k8s)
    k8s.emu.emulator.wait_idle()
    assert [j.metadata.name for j in jobs(k8s)] == [first]
    k8s.emu.executor.script(match=lambda p: True, exit_code=0)
    pod = eventually(lambda: k8s.core.list_namespaced_pod(k8s.ns).items)[0]
    k8s.emu.executor.finish(pod.metadata.name)
    late = f"cj-{int(skipped.timestamp()) // 60}"
    eventually(lambda: late in [j.metadata.name for j in jobs(k8s)])


def test_unexpected_owned_job_is_reported_not_adopted(k8s):
    cj = k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob(suspend=True))
    template = cronjob()["spec"]["jobTemplate"]["spec"]["template"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "name": "cj",
        "uid": cj.metadata.uid,
        "controller": True,
    }
    body = {
        "metadata": {"name": "stray", "ownerReferences": [owner]},
        "spec": {"suspend": True, "template": template},
    }
    k8s.batch.create_namespaced_job(k8s.ns, body)
    event = eventually(lambda: cronjob_events(k8s, "UnexpectedJob"))[0]
    assert event.type == "Warning" and event.message.endswith(": stray")
    k8s.emu.emulator.wait_idle()
    assert not k8s.batch.read_namespaced_cron_job("cj", k8s.ns).status.active


def test_existing_job_of_someone_else_is_not_adopted(k8s):
    k8s.batch.create_namespaced_cron_job(k8s.ns, cronjob())
    at = next_boundary(k8s.emu.clock.now(), 5)
    template = cronjob()["spec"]["jobTemplate"]["spec"]["template"]
    body = {
        "metadata": {"name": f"cj-{int(at.timestamp()) // 60}"},
        "spec": {"suspend": True, "template": template},
    }
    k8s.batch.create_namespaced_job(k8s.ns, body)
    k8s.emu.clock.advance_to(at + timedelta(seconds=1))
    k8s.emu.emulator.wait_idle()
    status = k8s.batch.read_namespaced_cron_job("cj", k8s.ns).status
    assert not status.active and status.last_schedule_time is None
    assert not cronjob_events(k8s, "SuccessfulCreate")
