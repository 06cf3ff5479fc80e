"""Scripted containers: pods whose outcome a test decides, run by the node agent.

Controller tests need pods that end as the test says (exit code, termination message,
how long they run, or held Running until the test ends them) on either backend. With
`AgentConfig(scripted=ScriptedPods())`, every container the agent takes runs
`scripted_program.py` instead of its image: a real process, which gets the pod's env and
volumes, SIGTERM on deletion and the grace period as any other, and whose status the agent
writes as a kubelet does. So the Job controller, the garbage collector and the test see
exactly what they would see of a real container that behaves like that.

`script(...)` rules are tried newest first, once per pod (when its containers are set up);
unmatched pods exit 0 at once. Every main container of a pod follows its pod's rule; init
containers exit 0 at once. A rule's program reads its outcome from a control directory of
its pod, where `finish()` writes the outcome of a held pod.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kube import ApiError, Kube

Obj = dict[str, Any]
PROGRAM = Path(__file__).with_name("scripted_program.py")
START_WAIT = 30.0  # how long finish() and disrupt() wait for a pod the agent is setting up


@dataclass
class PodScript:
    """The outcome of the pods `match` accepts; `times=None` applies to every one."""

    match: Callable[[Obj], bool]
    exit_code: int = 0
    message: str = ""
    duration: float = 0.0
    hold: bool = False
    log: str = ""
    times: int | None = None

    def outcome(self) -> Obj:
        """What the scripted program reads (`script.json`)."""
        return {
            "exit_code": self.exit_code,
            "message": self.message,
            "duration": self.duration,
            "hold": self.hold,
            "log": self.log,
        }


class ScriptedPods:
    """What a test scripts, and what it can see of the pods that ran (`started`, `killed`)."""

    def __init__(self, images: tuple[str, ...] | None = None) -> None:
        self._images = images  # None: every container
        self._lock = threading.Lock()
        self._rules: list[PodScript] = []
        self._dirs: dict[str, Path] = {}  # pod name → control dir of its newest pod
        self._chosen: set[str] = set()  # uids whose rule is chosen
        self._killed: list[str] = []
        self._root: Path | None = None
        self._kube: Kube | None = None
        self.started: list[str] = []

    def attach(self, root: Path, kube: Kube) -> None:
        """Called by the agent that runs the scripted pods: where control dirs go, its API."""
        self._root, self._kube = root, kube

    # -- what tests call -------------------------------------------------------------------
    def script(
        self,
        *,
        job: str | None = None,
        pod_prefix: str | None = None,
        match: Callable[[Obj], bool] | None = None,
        exit_code: int = 0,
        message: str = "",
        duration: float = 0.0,
        hold: bool = False,
        log: str = "",
        times: int | None = None,
    ) -> PodScript:
        """Script the pods of Job `job` (or with a name prefix, or a predicate)."""

        def matcher(pod: Obj) -> bool:
            meta = pod["metadata"]
            if job is not None and (meta.get("labels") or {}).get("job-name") != job:
                return False
            if pod_prefix is not None and not meta["name"].startswith(pod_prefix):
                return False
            return match(pod) if match else True

        rule = PodScript(matcher, exit_code, message, duration, hold, log, times)
        with self._lock:
            self._rules.insert(0, rule)
        return rule

    def finish(
        self, pod_name: str, *, exit_code: int = 0, message: str = "", timeout: float = START_WAIT
    ) -> None:
        """End a (held) pod now, with this exit code and termination message; a pod the agent
        has not set up yet is waited for (KeyError after `timeout` seconds)."""
        control = self._control_of(pod_name, timeout=timeout)
        partial = control / "finish.json.part"
        partial.write_text(json.dumps({"exit_code": exit_code, "message": message}))
        os.replace(partial, control / "finish.json")  # the program never reads half a file

    def disrupt(self, pod_name: str, *, reason: str = "EvictionByEvictionAPI") -> None:
        """What an eviction does to a pod: a DisruptionTarget condition, then it dies (137)."""
        control = self._control_of(pod_name)
        namespace = json.loads((control / "pod.json").read_text())["namespace"]
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": reason,
            "message": "Eviction API: evicting",
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self._add_condition(namespace, pod_name, condition)
        self.finish(pod_name, exit_code=137)

    @property
    def killed(self) -> list[str]:
        """Scripted pods the agent was told to stop (deleted: suspended, cancelled...)."""
        with self._lock:
            return list(self._killed)

    # -- what the agent calls --------------------------------------------------------------
    def stopping(self, pod: Obj) -> None:
        """The agent stops this pod's containers (it is deleted, or gone)."""
        meta = pod["metadata"]
        with self._lock:
            if meta["uid"] in self._chosen and meta["name"] not in self._killed:
                self._killed.append(meta["name"])

    def takes(self, container: Obj) -> bool:
        if self._images is None:
            return True
        image = str(container.get("image") or "")
        return image in self._images or image.rsplit(":", 1)[0] in self._images

    def command(self, container: Obj, *, pod: Obj) -> tuple[tuple[str, ...], Obj]:
        """The argv of `container` and the container as run (without probes: a scripted
        container is ready once it runs)."""
        init = container["name"] in {c["name"] for c in pod["spec"].get("initContainers") or []}
        control = self._prepare(pod)
        plain = {k: v for k, v in container.items() if not k.endswith("Probe")}
        argv = (sys.executable, "-S", str(PROGRAM), str(control), "init" if init else "main")
        return argv, plain

    def _prepare(self, pod: Obj) -> Path:
        """The pod's control dir, with its rule's outcome (chosen once per pod)."""
        meta = pod["metadata"]
        assert self._root is not None, "ScriptedPods is not attached to a node agent"
        control: Path = self._root / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"
        with self._lock:
            if meta["uid"] in self._chosen:
                return control
            rule = self._rule_for(pod)
            control.mkdir(parents=True, exist_ok=True)
            (control / "pod.json").write_text(json.dumps({"namespace": meta["namespace"]}))
            (control / "script.json").write_text(json.dumps(rule.outcome()))
            self._chosen.add(meta["uid"])
            self._dirs[meta["name"]] = control
            self.started.append(meta["name"])
        return control

    def _rule_for(self, pod: Obj) -> PodScript:
        for rule in self._rules:
            if (rule.times is None or rule.times > 0) and rule.match(pod):
                if rule.times is not None:
                    rule.times -= 1
                return rule
        return PodScript(match=lambda _p: True)

    def _control_of(self, pod_name: str, *, timeout: float = START_WAIT) -> Path:
        """The pod's control dir, once the agent has set the pod up (it may be just bound)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = self._dirs.get(pod_name)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise KeyError(f"no scripted pod {pod_name!r} started within {timeout:g}s")
            time.sleep(0.01)

    def _add_condition(self, namespace: str, name: str, condition: Obj) -> None:
        assert self._kube is not None
        for _ in range(10):
            pod = self._kube.get_pod(namespace, name)
            if pod is None:
                return
            status = pod.get("status") or {}
            kept = [c for c in status.get("conditions") or [] if c.get("type") != condition["type"]]
            pod["status"] = {**status, "conditions": [*kept, condition]}
            try:
                self._kube.replace_pod_status(pod)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
        raise RuntimeError(f"pod {namespace}/{name}: DisruptionTarget not written (conflicts)")
