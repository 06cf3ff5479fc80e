"""The agent's pure parts: pod status, node manifest, restart rules, from plain data.

Real: the builders of e2e/nodeagent/status.py and node.py. Faked: nothing (no I/O, no
clock: times are strings passed in).
"""

from __future__ import annotations

from pathlib import Path

from e2e.nodeagent.config import AgentConfig
from e2e.nodeagent.node import node_manifest, ready_since
from e2e.nodeagent.status import (
    ContainerReport,
    PodReport,
    lost_report,
    pod_status,
    restart_delay,
    running,
    should_restart,
    terminated,
    waiting,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"


def _report(phase: str, state: dict) -> PodReport:
    return PodReport(phase, (ContainerReport("main", "img", state),), T0)


def _conditions(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def test_running_pod_is_ready() -> None:
    status = pod_status(_report("Running", running(T0)), current={}, now=T0, host_ip="127.0.0.1")

    conditions = _conditions(status)
    assert {t: c["status"] for t, c in conditions.items()} == dict.fromkeys(
        ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"),
        "True",
    )
    assert status["containerStatuses"][0]["ready"] is True


def test_transition_time_moves_only_when_a_condition_flips() -> None:
    first = pod_status(_report("Running", running(T0)), current={}, now=T0, host_ip="h")
    ended = terminated(0, "Completed", started_at=T0, finished_at=T1)

    second = pod_status(_report("Succeeded", ended), current=first, now=T1, host_ip="h")

    conditions = _conditions(second)
    assert conditions["Initialized"]["lastTransitionTime"] == T0
    assert conditions["Ready"]["lastTransitionTime"] == T1
    assert conditions["Ready"]["reason"] == "PodCompleted"
    assert conditions["PodReadyToStartContainers"]["status"] == "False"


def test_keeps_what_others_wrote() -> None:
    current = {
        "qosClass": "BestEffort",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "x"}],
    }

    status = pod_status(_report("Pending", waiting("ContainerCreating")), current=current,
                        now=T0, host_ip="h")  # fmt: skip

    assert status["qosClass"] == "BestEffort"
    assert _conditions(status)["DisruptionTarget"]["reason"] == "x"
    assert _conditions(status)["Ready"]["message"] == "containers with unready status: [main]"


def test_lost_pod_is_failed_with_status_unknown() -> None:
    pod = {
        "spec": {"containers": [{"name": "main", "image": "img"}]},
        "status": {"startTime": T0, "containerStatuses": [{"name": "main", "restartCount": 2}]},
    }

    report = lost_report(pod, now=T1)

    [container] = report.containers
    assert report.phase == "Failed" and container.restart_count == 2
    state = container.state["terminated"]
    assert (state["exitCode"], state["reason"], state["startedAt"]) == (
        137,
        "ContainerStatusUnknown",
        T0,
    )


def test_restart_rules() -> None:
    assert [should_restart(p, 1) for p in ("Never", "OnFailure", "Always")] == [False, True, True]
    assert [should_restart(p, 0) for p in ("Never", "OnFailure", "Always")] == [False, False, True]
    assert [restart_delay(n, base=10, cap=300) for n in (1, 2, 3, 6, 9)] == [10, 20, 40, 300, 300]


def test_node_is_registered_ready(tmp_path: Path) -> None:
    config = AgentConfig(workdir=tmp_path, node_name="n", capacity={"cpu": "2", "pods": "9"})

    node = node_manifest(config, now=T0)

    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["lastHeartbeatTime"]) == ("True", T0)
    assert node["status"]["allocatable"] == {"cpu": "2", "pods": "9"}
    assert ready_since(node, now=T1) == T0
    assert ready_since({"status": {}}, now=T1) == T1
