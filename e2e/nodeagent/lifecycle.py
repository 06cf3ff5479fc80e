"""One container of a pod, from its first start to its last exit, as the kubelet keeps it.

Each start runs the container's local program (`local.executor.PodProcess`: a session of
its own, output pumped line by line into `<container>-<restart>.log`), probes it while it
runs (probes.py), and records how it ended. Then the pod's `restartPolicy` decides: an init
container is restarted when it failed (unless `Never`), any other container as
`should_restart` says, after the crash-loop back-off (`CrashLoopBackOff`). Stopping is
the container runtime's: SIGTERM to the main process, SIGKILL to its whole process group
after the grace period. A startup probe past its failure threshold gets the container
killed and restarted in the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

from local.executor import PodProcess
from local.podspec import PreparedPod

from .config import AgentConfig
from .containers import ContainerFiles, clear
from .images import Launch
from .logs import log_line
from .probes import ContainerProbes
from .status import ContainerReport, restart_delay, rfc3339, running, should_restart, terminated

Obj = dict[str, Any]
POLL = 0.05
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048  # the kubelet's FallbackToLogsOnError tail


class Pod(Protocol):
    """What a container needs of its pod's worker."""

    config: AgentConfig
    pod: Obj
    pod_ip: str
    log_dir: Path

    @property
    def grace(self) -> float:
        """Seconds between SIGTERM and SIGKILL."""
        ...

    def is_stopping(self) -> bool: ...

    def sleep(self, seconds: float) -> None:
        """Sleep; raises when the pod stops meanwhile."""
        ...

    def changed(self) -> None:
        """A container's state changed: report the pod."""
        ...


@dataclasses.dataclass
class ContainerLife:
    """One container's state and its runs; `run()` blocks until it will not start again."""

    spec: Obj
    init: bool
    state: Obj
    last_state: Obj = dataclasses.field(default_factory=dict)
    restarts: int = 0
    container_id: str = ""
    ready: bool = False
    started: bool = False
    launch: Launch | None = None
    files: ContainerFiles | None = None
    pid: int | None = None
    tail: deque[str] = dataclasses.field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    _log: IO[str] | None = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def has_run(self) -> bool:
        return bool(self.container_id)

    @property
    def succeeded(self) -> bool:
        return int((self.state.get("terminated") or {}).get("exitCode", -1)) == 0

    def report(self) -> ContainerReport:
        return ContainerReport(
            name=self.name,
            image=str(self.spec.get("image", "")),
            state=self.state,
            last_state=self.last_state,
            restart_count=self.restarts,
            container_id=self.container_id,
            ready=self.succeeded if self.init else self.ready,
            started=self.started,
        )

    # -- the runs --------------------------------------------------------------------------
    def run(self, pod: Pod) -> int:
        """Start, watch, restart per policy; the last exit code."""
        policy = str(pod.pod["spec"].get("restartPolicy") or "Always")
        while True:
            code = self.run_once(pod)
            again = code != 0 and policy != "Never" if self.init else should_restart(policy, code)
            if pod.is_stopping() or not again:
                return code
            self._back_off(pod)

    def run_once(self, pod: Pod) -> int:
        """Start the container once, watch it to its end, and record how it ended."""
        assert self.launch is not None and self.files is not None
        clear(self.files.termination_path)
        started = rfc3339(pod.config.now())
        prepared = PreparedPod(
            argv=(*_death_signal_prefix(), *self.launch.prefix, *self.launch.args),
            env={**self.files.env, **self.launch.env},
            root=self.files.termination_path.parent,
            termination_path=self.files.termination_path,
            grace_seconds=pod.grace,
        )
        with self._open_log(pod):
            try:
                process = PodProcess(prepared, on_line=self._line, cwd=pod.config.cwd)
            except OSError as exc:  # the runtime's StartError: the program cannot be executed
                finished = rfc3339(pod.config.now())
                self.state = terminated(
                    128, "StartError", started_at=started, finished_at=finished, message=str(exc)
                )
                return 128
            self.pid = process.proc.pid
            self.container_id = f"local-process://{self.pid}"
            self.state = running(started)
            probes = None if self.init else ContainerProbes(self.launch.container, pod.pod_ip)
            self.started, self.ready = (probes.started, probes.ready) if probes else (True, False)
            pod.changed()
            self._supervise(pod, process, probes)
            ended = process.wait()
        self.started = self.ready = False
        message = ended.message or self._fallback_message(ended.exit_code)
        reason = "Completed" if ended.exit_code == 0 else "Error"
        finished = rfc3339(pod.config.now())
        self.state = terminated(
            ended.exit_code, reason, started_at=started, finished_at=finished, message=message
        )
        return ended.exit_code

    def _supervise(self, pod: Pod, process: PodProcess, probes: ContainerProbes | None) -> None:
        """Wait for the process, probing it; once stopping, SIGTERM it, then SIGKILL its group."""
        kill_at: float | None = None
        while process.poll() is None:
            if probes is not None and kill_at is None:
                if probes.tick():
                    self.started, self.ready = probes.started, probes.ready
                    pod.changed()
                if probes.startup_failed:  # the kubelet kills it, and restarts it per policy
                    kill_at = _terminate(process, pod.grace)
            if kill_at is None and pod.is_stopping():
                kill_at = _terminate(process, pod.grace)
            if kill_at is not None and time.monotonic() >= kill_at:
                _signal(process.proc.pid, signal.SIGKILL, group=True)
            time.sleep(POLL)
        _signal(process.proc.pid, signal.SIGKILL, group=True)  # the container's leftovers

    def _back_off(self, pod: Pod) -> None:
        """Between restarts: CrashLoopBackOff, then the same container again."""
        self.restarts += 1
        self.last_state = self.state
        config = pod.config
        delay = restart_delay(
            self.restarts, base=config.restart_backoff, cap=config.restart_backoff_max
        )
        meta = pod.pod["metadata"]
        message = (
            f"back-off {delay:g}s restarting failed container={self.name} "
            f"pod={meta['name']}_{meta['namespace']}({meta['uid']})"
        )
        self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
        pod.changed()
        pod.sleep(delay)

    # -- output ----------------------------------------------------------------------------
    def _fallback_message(self, exit_code: int) -> str:
        if exit_code == 0 or self.spec.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return ""
        text = "\n".join(self.tail)
        return text.encode()[-LOG_TAIL_BYTES:].decode(errors="replace")

    @contextlib.contextmanager
    def _open_log(self, pod: Pod) -> Iterator[None]:
        pod.log_dir.mkdir(parents=True, exist_ok=True)
        self.tail.clear()
        with (pod.log_dir / f"{self.name}-{self.restarts}.log").open("w") as handle:
            self._log = handle
            try:
                yield
            finally:
                with self._lock:
                    self._log = None

    def _line(self, stream: str, line: str) -> None:
        self.tail.append(line)
        with self._lock:
            if self._log is not None:
                self._log.write(log_line(stream, line))
                self._log.flush()


def _terminate(process: PodProcess, grace: float) -> float:
    _signal(process.proc.pid, signal.SIGTERM, group=False)
    return time.monotonic() + grace


def _signal(pid: int, sig: signal.Signals, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)  # PodProcess starts each container in a session of its own
        else:
            os.kill(pid, sig)


def _death_signal_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --`: a container dies with the thread that started it, so an
    agent killed outright leaves no process behind on a shared machine."""
    import shutil

    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
