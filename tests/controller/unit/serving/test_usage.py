"""Which runs an on-demand deployment counts, as the serving adapter indexes them from the run
adapter's events: only runs admitted to it (status.modelDeployment) and live, never a refused
one, whatever its config names.

Real: controller.kube.serving.KubeServing's run and config listener and its UsageIndex, on plain
dicts (no informer is started, nothing is sent to an API server). Faked: the work queue (a list
of the keys it was given) and the event sink.
"""

from __future__ import annotations

from typing import Any, cast

from controller.kube.serving import KubeServing
from controller.kube.transport import Transport

Obj = dict[str, Any]
TARGET = {"model": {"deploymentRef": {"name": "iris", "namespace": "team-b"}}}


class Queue(list[tuple[str, bool]]):
    def __call__(self, key: str, *, urgent: bool = False, batched: bool = False) -> None:
        self.append((key, urgent))


def adapter() -> tuple[KubeServing, Queue]:
    queue = Queue()
    serving = KubeServing(
        cast(Transport, None),
        enqueue=queue,
        events=lambda obj, **_: None,
        runs_of_config=lambda _key: [],
    )
    return serving, queue


def config() -> Obj:
    return {"metadata": {"name": "cfg", "namespace": "tenant-a"}, "spec": TARGET}


def run(name: str = "hog", **status: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "tenant-a"},
        "spec": {"configRef": {"name": "cfg"}},
        "status": status,
    }


def test_a_refused_run_neither_counts_nor_wakes_the_deployment_its_config_names() -> None:
    serving, queue = adapter()
    serving.on_run_event("InferenceConfig", config(), True)
    queue.clear()
    refused = {"type": "Accepted", "status": "False", "reason": "DeploymentNotAllowed"}
    serving.on_run_event("InferenceRun", run(), True)  # new: not admitted yet
    serving.on_run_event("InferenceRun", run(phase="Pending", conditions=[refused]), True)
    assert serving.usage("team-b", "iris").active == ()
    assert queue == []


def test_an_admitted_run_counts_while_live_and_its_end_is_remembered() -> None:
    serving, queue = adapter()
    admitted = {"modelDeployment": "team-b/iris"}
    serving.on_run_event("InferenceRun", run(phase="Pending", **admitted), True)
    assert serving.usage("team-b", "iris").active == ("tenant-a/hog",)
    assert queue == [("ModelDeployment/team-b/iris", True)]  # urgent: it waits for it
    queue.clear()
    serving.on_run_event("InferenceRun", run(phase="Running", **admitted), True)
    assert queue == []  # still the same use: nothing to look at again
    done = run(phase="Succeeded", completionTime="2026-03-01T02:00:00Z", **admitted)
    serving.on_run_event("InferenceRun", done, True)
    usage = serving.usage("team-b", "iris")
    assert usage.active == () and usage.last_finished is not None
    assert queue == [("ModelDeployment/team-b/iris", False)]
    serving.on_run_event("InferenceRun", done, False)
    assert serving.usage("team-b", "iris").last_finished is None


def test_a_run_refused_after_it_was_admitted_stops_counting_at_once() -> None:
    serving, queue = adapter()
    serving.on_run_event("InferenceRun", run(phase="Pending", modelDeployment="team-b/iris"), True)
    queue.clear()
    serving.on_run_event("InferenceRun", run(phase="Pending"), True)  # the namespace was removed
    assert serving.usage("team-b", "iris").active == ()
    assert queue == [("ModelDeployment/team-b/iris", False)]
