"""Pod executors: what "running a container" means inside the emulator.

The kubelet part of the emulator hands every new pod to a PodExecutor together
with a PodHandle. The executor reports progress only through the handle
(`set_running`, `set_terminated`, `add_condition`), and is told to `kill` a pod
when it is deleted. The default ScriptedExecutor runs nothing: tests script
exit codes, termination messages and durations (measured on the emulator clock).
A subprocess executor that really runs the container spec implements the same
two-method protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .clock import Timers

Obj = dict[str, Any]


class PodHandle(Protocol):
    """How an executor reports a pod's lifecycle. All methods are thread-safe."""

    @property
    def pod(self) -> Obj:
        """The pod as it was when handed to the executor (env, volumes, labels...)."""
        ...

    def set_running(self) -> None:
        """Containers started: phase Running, Ready condition True."""
        ...

    def set_terminated(
        self,
        exit_code: int,
        *,
        message: str = "",
        reason: str | None = None,
        container: str | None = None,
    ) -> None:
        """A container (default: all) exited; the pod turns Succeeded/Failed when all have."""
        ...

    def add_condition(
        self, type_: str, *, status: str = "True", reason: str = "", message: str = ""
    ) -> None:
        """Add a pod condition, e.g. DisruptionTarget before a kill."""
        ...

    def append_log(self, text: str) -> None:
        """Container output, served by `GET pods/<name>/log`."""
        ...


class PodExecutor(Protocol):
    """Runs pods. `start` and `kill` must return quickly (do work on your own threads)."""

    def start(self, pod: Obj, handle: PodHandle) -> None: ...

    def kill(self, pod: Obj, handle: PodHandle, *, grace_seconds: int) -> None:
        """Stop the pod (it was deleted); must end with `handle.set_terminated`."""
        ...

    def close(self) -> None: ...


@dataclass
class PodScript:
    """The outcome of pods matched by `match`."""

    match: Callable[[Obj], bool]
    exit_code: int = 0
    message: str = ""
    reason: str | None = None
    duration: float = 0.0
    hold: bool = False
    conditions: list[Obj] = field(default_factory=list)
    log: str = ""
    times: int | None = None  # None = every matching pod


class ScriptedExecutor:
    """Default executor: pods run for `duration` clock-seconds and exit as scripted.

    `script(...)` rules are tried newest first; unmatched pods succeed at once.
    `hold=True` keeps pods Running until `finish(pod_name, ...)` is called.
    """

    def __init__(self, timers: Timers) -> None:
        self._timers = timers
        self._lock = threading.Lock()
        self._scripts: list[PodScript] = []
        self._handles: dict[str, PodHandle] = {}
        self.started: list[str] = []
        self.killed: list[str] = []

    def script(
        self,
        *,
        job: str | None = None,
        pod_prefix: str | None = None,
        match: Callable[[Obj], bool] | None = None,
        exit_code: int = 0,
        message: str = "",
        reason: str | None = None,
        duration: float = 0.0,
        hold: bool = False,
        conditions: list[Obj] | None = None,
        log: str = "",
        times: int | None = None,
    ) -> PodScript:
        """Script pods of Job `job` (or with a name prefix, or a predicate)."""

        def matcher(pod: Obj) -> bool:
            meta = pod["metadata"]
            if job is not None and (meta.get("labels") or {}).get("job-name") != job:
                return False
            if pod_prefix is not None and not meta["name"].startswith(pod_prefix):
                return False
            return match(pod) if match else True

        rule = PodScript(
            matcher, exit_code, message, reason, duration, hold, conditions or [], log, times
        )
        with self._lock:
            self._scripts.insert(0, rule)
        return rule

    def _rule_for(self, pod: Obj) -> PodScript:
        with self._lock:
            for rule in self._scripts:
                if (rule.times is None or rule.times > 0) and rule.match(pod):
                    if rule.times is not None:
                        rule.times -= 1
                    return rule
        return PodScript(match=lambda _p: True)

    def start(self, pod: Obj, handle: PodHandle) -> None:
        name = pod["metadata"]["name"]
        rule = self._rule_for(pod)
        with self._lock:
            self._handles[name] = handle
            self.started.append(name)
        handle.set_running()
        if rule.log:
            handle.append_log(rule.log)
        if rule.hold:
            return
        self._timers.call_later(rule.duration, lambda: self._finish(handle, rule))

    def _finish(self, handle: PodHandle, rule: PodScript) -> None:
        for cond in rule.conditions:
            handle.add_condition(
                cond["type"],
                status=cond.get("status", "True"),
                reason=cond.get("reason", ""),
                message=cond.get("message", ""),
            )
        handle.set_terminated(rule.exit_code, message=rule.message, reason=rule.reason)

    def finish(
        self, pod_name: str, *, exit_code: int = 0, message: str = "", reason: str | None = None
    ) -> None:
        """End a held pod now."""
        with self._lock:
            handle = self._handles[pod_name]
        handle.set_terminated(exit_code, message=message, reason=reason)

    def disrupt(self, pod_name: str, *, reason: str = "EvictionByEvictionAPI") -> None:
        """Mark a pod disrupted (DisruptionTarget condition) and kill it, as an eviction does."""
        with self._lock:
            handle = self._handles[pod_name]
        handle.add_condition("DisruptionTarget", reason=reason, message="Eviction API: evicting")
        handle.set_terminated(137, reason="Error")

    def kill(self, pod: Obj, handle: PodHandle, *, grace_seconds: int) -> None:
        with self._lock:
            self.killed.append(pod["metadata"]["name"])
        handle.set_terminated(143, reason="Error")

    def close(self) -> None:
        with self._lock:
            self._handles.clear()
