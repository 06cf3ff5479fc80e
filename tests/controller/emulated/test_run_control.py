"""Live progress, suspend, resume and cancel of one-shot runs on the API emulator, and what
`kubectl get irun` prints of them, on either backend.

Real: the backend (its Job controller deleting a suspended Job's pods and starting new ones
on resume, the `pods/log` subresource with tailLines/limitBytes read from the node agent's
kubelet endpoint, garbage collection), the node agent, the official client, the whole
controller, the real kubectl. Faked: what pods do — a scripted container prints the
runner's progress line into its log and is held running until the test ends it.
"""

from __future__ import annotations

import json

from e2e.fixtures import eventually
from tests.controller.emulated.harness import SUMMARY, Env

REPORT = '{"longrunProgress":{"read":40,"written":39,"failed":1,"rate":4.0,"total":100}}\n'
FAST = {"runner": {"progressIntervalSeconds": 1}}  # the runner reports every second


def _running_pods(env: Env) -> list[str]:
    return [p["metadata"]["name"] for p in env.pods() if p["status"].get("phase") == "Running"]


def test_a_running_run_shows_the_runners_progress_in_status_and_columns(env: Env) -> None:
    env.scripted.script(hold=True, log="longrun-runner: started\n" + REPORT)
    env.start(progress_interval=1.0)
    env.create_config(**FAST)
    env.create_run()
    progress = eventually(
        lambda: env.status().get("progress", {}).get("text") and env.status()["progress"],
        timeout=15,
    )
    assert progress["recordsWritten"] == 39 and progress["recordsTotal"] == 100
    assert (progress["text"], progress["rateText"], progress["etaText"]) == (
        "40/100 (40%)",
        "4/s",
        "15s",
    )
    table = env.kube.kubectl("get", "irun", "-n", env.ns).stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "PHASE",
        "PROGRESS",
        "RATE",
        "ETA",
        "LAST",
        "RUN",
        "NEXT",
        "RUN",
        "AGE",
    ]
    assert table[1].split()[:6] == ["run", "Running", "40/100", "(40%)", "4/s", "15s"]
    env.scripted.finish(_running_pods(env)[0], exit_code=0, message=SUMMARY)
    done = env.wait_phase("Succeeded")
    assert done["result"]["recordsWritten"] == 9  # the summary, not the progress
    assert done["progress"]["text"] == "10/10 (100%)" and "rateText" not in done["progress"]


def test_the_next_run_column_prints_a_future_time_kubectl_can_show(env: Env) -> None:
    env.start()
    env.create_config()
    env.create_run(schedule="0 3 * * *")
    status = env.wait_phase("Scheduled")
    out = env.kube.kubectl("get", "irun", "run", "-n", env.ns, "-o", "wide").stdout
    assert "<invalid>" not in out
    assert status["nextScheduleTime"] in out  # RFC 3339, as stored
    assert "0 3 * * *" in out  # the schedule, with -o wide


def test_suspend_stops_the_pod_and_resume_starts_a_new_one(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config(backoffLimit=3)
    env.create_run()
    first = eventually(lambda: _running_pods(env) and _running_pods(env)[0])
    env.wait_phase("Running")

    env.patch_run("run", {"spec": {"suspend": True}})
    env.wait_phase("Suspended")
    assert env.jobs()[0]["spec"]["suspend"] is True
    eventually(lambda: first in env.scripted.killed and not _running_pods(env))
    assert env.condition("Running")["reason"] == "JobSuspended"

    env.patch_run("run", {"spec": {"suspend": False}})
    second = eventually(lambda: [p for p in _running_pods(env) if p != first])[0]
    env.wait_phase("Running")
    env.scripted.finish(second, exit_code=0, message=SUMMARY)
    status = env.wait_phase("Succeeded")
    assert status["result"]["recordsWritten"] == 9
    reasons = eventually(
        lambda: (
            {e["reason"] for e in env.events()} >= {"Suspended", "Resumed"}
            and {e["reason"] for e in env.events()}
        )
    )
    assert "Succeeded" in reasons


def test_cancel_stops_the_run_for_good_and_delete_still_cleans_up(env: Env) -> None:
    env.scripted.script(hold=True)
    env.start()
    env.create_config()
    env.create_run()
    pod = eventually(lambda: _running_pods(env) and _running_pods(env)[0])
    env.wait_phase("Running")

    env.patch_run("run", {"spec": {"cancel": True}})
    status = env.wait_phase("Cancelled")
    assert status["completionTime"] and env.condition("Failed")["status"] == "False"
    eventually(lambda: pod in env.scripted.killed and not _running_pods(env))
    assert env.jobs()[0]["spec"]["suspend"] is True  # kept, suspended, until the run goes
    eventually(lambda: "Cancelled" in {e["reason"] for e in env.events()})

    env.custom.delete_namespaced_custom_object(
        "longrun.dev", "v1alpha1", env.ns, "inferenceruns", "run"
    )
    eventually(lambda: not env.jobs() and not env.config_maps() and env.run() is None)


def test_only_suspend_and_cancel_may_change_on_a_one_shot_run(env: Env) -> None:
    env.create_config()
    env.create_run()
    for patch in ({"suspend": True}, {"suspend": False}, {"cancel": True}):
        env.patch_run("run", {"spec": patch})
    answer = env.kube.kubectl(
        "patch",
        "irun",
        "run",
        "-n",
        env.ns,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"cancel": False}}),
    )
    assert answer.returncode != 0 and "cannot be undone" in answer.stderr
    answer = env.kube.kubectl(
        "patch",
        "irun",
        "run",
        "-n",
        env.ns,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"timeoutSeconds": 5}}),
    )
    assert answer.returncode != 0 and "immutable after creation" in answer.stderr
