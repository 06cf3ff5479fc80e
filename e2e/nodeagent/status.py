"""A pod's status as a kubelet writes it, built from plain data (no I/O, no clock).

Controllers read exactly these fields: the Job controller counts `phase` and reads
`state.terminated.exitCode` for podFailurePolicy, longrun reads the runner's
summary from `state.terminated.message`. The agent owns the kubelet's part of the
status (phase, times, IPs, containerStatuses, its five conditions) and keeps the
rest as the API server has it: conditions others add (`DisruptionTarget`), the
`qosClass` the server set at creation. A condition's `lastTransitionTime` moves
only when its `status` flips.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
OWNED = ("phase", "reason", "message", "startTime", "hostIP", "hostIPs", "podIP", "podIPs")
LOST_MESSAGE = "The container could not be located when the pod was terminated"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


def rfc3339(when: datetime) -> str:
    """Kubernetes' `Time`: UTC, second precision."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(when: datetime) -> str:
    """Kubernetes' `MicroTime` (Lease renewTime): UTC, microseconds."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def waiting(reason: str, message: str = "") -> Obj:
    state: Obj = {"reason": reason}
    if message:
        state["message"] = message
    return {"waiting": state}


def running(started_at: str) -> Obj:
    return {"running": {"startedAt": started_at}}


def terminated(
    exit_code: int, reason: str, *, started_at: str, finished_at: str, message: str = ""
) -> Obj:
    state: Obj = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message:
        state["message"] = message
    return {"terminated": state}


@dataclass(frozen=True)
class ContainerReport:
    """One container as the kubelet reports it; `state` is one of the three above."""

    name: str
    image: str
    state: Obj
    last_state: Obj = field(default_factory=dict)
    restart_count: int = 0
    container_id: str = ""
    ready: bool | None = None  # None: ready while running (no probes)
    started: bool | None = None  # None: started while running

    @property
    def is_running(self) -> bool:
        return "running" in self.state

    @property
    def is_ready(self) -> bool:
        return self.is_running if self.ready is None else self.ready

    @property
    def is_started(self) -> bool:
        return self.is_running if self.started is None else self.started

    def as_status(self) -> Obj:
        out: Obj = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.is_ready,
            "started": self.is_started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


@dataclass(frozen=True)
class PodReport:
    """What the agent knows of a pod: its phase, its containers and its address."""

    phase: str
    containers: tuple[ContainerReport, ...]
    start_time: str
    reason: str = ""
    message: str = ""
    init_containers: tuple[ContainerReport, ...] = ()
    pod_ip: str = ""  # empty: the host's address

    @property
    def uninitialized(self) -> list[str]:
        """Init containers that have not completed."""
        return [
            c.name
            for c in self.init_containers
            if int((c.state.get("terminated") or {}).get("exitCode", -1)) != 0
        ]

    @property
    def is_terminal(self) -> bool:
        return self.phase in TERMINAL


def pod_status(report: PodReport, *, current: Obj, now: str, host_ip: str) -> Obj:
    """The whole status to PUT: the kubelet's fields from `report`, the rest of `current`."""
    mine = (*OWNED, "containerStatuses", "initContainerStatuses")
    status = {k: v for k, v in current.items() if k not in mine}
    pod_ip = report.pod_ip or host_ip  # network.py: each pod has a loopback address of its own
    status.update(
        phase=report.phase,
        startTime=report.start_time,
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=pod_ip,
        podIPs=[{"ip": pod_ip}],
        containerStatuses=[c.as_status() for c in report.containers],
        conditions=conditions(report, current.get("conditions") or [], now=now),
    )
    if report.init_containers:
        status["initContainerStatuses"] = [c.as_status() for c in report.init_containers]
    if report.reason:
        status["reason"] = report.reason
    if report.message:
        status["message"] = report.message
    return status


def conditions(report: PodReport, current: list[Obj], *, now: str) -> list[Obj]:
    """The kubelet's five conditions, plus every other condition of `current` as it is."""
    terminal = report.is_terminal
    ready = not terminal and all(c.is_running and c.is_ready for c in report.containers)
    unready = [c.name for c in report.containers if not (c.is_running and c.is_ready)]
    why = ("PodCompleted", "") if terminal else ("ContainersNotReady", _unready(unready))
    pending = report.uninitialized
    init_why = ("ContainersNotInitialized", _incomplete(pending)) if pending else ("", "")
    wanted = {
        "PodReadyToStartContainers": (not terminal, ("", "")),
        "Initialized": (not pending, init_why),
        "ContainersReady": (ready, why),
        "Ready": (ready, why),
        "PodScheduled": (True, ("", "")),
    }
    old = {c.get("type"): c for c in current}
    out = [c for c in current if c.get("type") not in wanted]
    for type_, (ok, (reason, message)) in wanted.items():
        out.append(
            condition(type_, ok, old=old.get(type_), now=now, reason=reason, message=message)
        )
    return out


def _unready(names: list[str]) -> str:
    return f"containers with unready status: [{' '.join(names)}]"


def _incomplete(names: list[str]) -> str:
    return f"containers with incomplete status: [{' '.join(names)}]"


def condition(
    type_: str, ok: bool, *, old: Obj | None, now: str, reason: str = "", message: str = ""
) -> Obj:
    """One pod condition; its lastTransitionTime is kept while its status stays the same."""
    status = "True" if ok else "False"
    if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
        since = old["lastTransitionTime"]
    else:
        since = now
    out: Obj = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
    if not ok and reason:
        out["reason"] = reason
    if not ok and message:
        out["message"] = message
    return out


def phase_of(exit_codes: list[int]) -> str:
    """Succeeded when every container exited 0, else Failed."""
    return "Succeeded" if all(code == 0 for code in exit_codes) else "Failed"


def lost_report(pod: Obj, *, now: str) -> PodReport:
    """A pod this agent cannot account for (never started, or started by an agent that is
    gone): Failed, each container `ContainerStatusUnknown` 137, as the kubelet says it."""
    status = pod.get("status") or {}
    started = status.get("startTime") or now
    state = terminated(
        137, "ContainerStatusUnknown", started_at=started, finished_at=now, message=LOST_MESSAGE
    )
    containers = tuple(
        ContainerReport(c["name"], c.get("image", ""), state, restart_count=_restarts(status, c))
        for c in pod["spec"].get("containers") or []
    )
    return PodReport("Failed", containers, started)


def _restarts(status: Obj, container: Obj) -> int:
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == container["name"]:
            return int(cs.get("restartCount") or 0)
    return 0


def should_restart(policy: str, exit_code: int) -> bool:
    """restartPolicy: Always restarts every exit, OnFailure a non-zero one, Never none."""
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def restart_delay(restarts: int, *, base: float, cap: float) -> float:
    """The kubelet's crash-loop back-off: base, doubling per restart, capped."""
    return float(min(cap, base * 2 ** max(0, restarts - 1)))


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL
