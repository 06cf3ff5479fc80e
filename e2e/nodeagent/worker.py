"""One pod on this machine: its container as a process, from the first status to the last.

`local.podspec.prepare_pod` turns the pod into an argv, an env and files, and
`local.executor.PodProcess` starts the process and pumps its output, exactly as
for `longrun run`; this module adds what a kubelet does around them:

- a setup error (a missing Secret, an unmapped image) leaves the pod Pending with
  the container waiting (`CreateContainerConfigError`, `ErrImagePull` →
  `ImagePullBackOff`), retried with back-off, as on a cluster;
- `restartPolicy` OnFailure/Always restarts the container in place, after the
  crash-loop back-off, with `restartCount` and `lastState` (volumes survive);
- `activeDeadlineSeconds` counts from the pod's start; past it the pod is stopped
  and Failed with reason `DeadlineExceeded`;
- stopping is the container runtime's: SIGTERM to the main process, SIGKILL to
  the whole process group after the grace period, and nothing of the container
  outlives it (a pod whose process is gone leaves no orphans holding its pipes);
- the termination message is the file the container wrote, or for
  `FallbackToLogsOnError` the tail of its output when it failed without one.

A worker reports through a `Reporter` and never decides about the pod object
itself (deleting it is the agent's reconcile, which sees the terminal status).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from local.executor import PodProcess
from local.podspec import ImageMap, PodSetupError, PreparedPod, prepare_pod

from .config import AgentConfig
from .kube import Kube
from .source import ApiSource, link_claims
from .status import (
    DEADLINE_MESSAGE,
    LOST_MESSAGE,
    ContainerReport,
    PodReport,
    phase_of,
    restart_delay,
    rfc3339,
    running,
    should_restart,
    terminated,
    waiting,
)

Obj = dict[str, Any]
log = logging.getLogger(__name__)
POLL = 0.05
LOG_TAIL_LINES, LOG_TAIL_BYTES = 80, 2048  # the kubelet's FallbackToLogsOnError tail
# What a pod sets itself; the rest of the agent's environment (PATH, HOME...) is inherited.
POD_OWN_ENV = ("CONTRACT_PATH", "TERMINATION_MESSAGE_PATH", "JOB_NAME", "POD_UID")


class Reporter(Protocol):
    def report(self, pod: Obj, report: PodReport) -> bool:
        """Write the pod's status; False when the pod is gone (stop reporting)."""
        ...


class Stopped(Exception):
    """The pod is being stopped (deleted, past its deadline, or the agent stops)."""


@dataclasses.dataclass
class _Container:
    name: str
    image: str
    state: Obj
    last_state: Obj = dataclasses.field(default_factory=dict)
    restarts: int = 0
    container_id: str = ""

    def report(self) -> ContainerReport:
        return ContainerReport(
            name=self.name,
            image=self.image,
            state=self.state,
            last_state=self.last_state,
            restart_count=self.restarts,
            container_id=self.container_id,
        )


class PodWorker:
    """Runs one pod on a thread of its own; `terminate` and `abandon` may come any time."""

    def __init__(
        self,
        pod: Obj,
        *,
        kube: Kube,
        config: AgentConfig,
        reporter: Reporter,
        on_done: Callable[[PodWorker], None] = lambda _w: None,
    ) -> None:
        self.pod = pod
        meta = pod["metadata"]
        self.key, self.uid = f"{meta['namespace']}/{meta['name']}", meta["uid"]
        self.root = config.workdir / "pods" / meta["namespace"] / f"{meta['name']}-{self.uid[:8]}"
        self._source = ApiSource(kube, namespace=meta["namespace"], root=self.root)
        self._config, self._reporter, self._on_done = config, reporter, on_done
        first = pod["spec"]["containers"][0]
        self._c = _Container(first["name"], first.get("image", ""), waiting("ContainerCreating"))
        self._start_time = rfc3339(config.now())
        self._started = time.monotonic()
        deadline = pod["spec"].get("activeDeadlineSeconds")
        self._deadline = None if deadline is None else self._started + float(deadline)
        self._deadline_exceeded = False
        self._stop = threading.Event()
        self._grace = 0.0
        self._silent = False
        self._lock = threading.Lock()
        self._tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self._log: IO[str] | None = None
        self.pid: int | None = None
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pod-{self.key}", daemon=True)

    # -- what the agent calls ------------------------------------------------------------
    def start(self) -> PodWorker:
        self._thread.start()
        return self

    def terminate(self, grace: float) -> None:
        """The pod is deleting: stop the container (SIGTERM, SIGKILL after `grace` seconds)
        and report how it ended. Safe to repeat; the first grace period stands."""
        self._request_stop(grace, silent=False)

    def abandon(self, grace: float) -> None:
        """Stop the container and report nothing (the pod is gone, or the agent stops)."""
        self._request_stop(grace, silent=True)

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def remove_files(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _request_stop(self, grace: float, *, silent: bool) -> None:
        with self._lock:
            self._silent = self._silent or silent
            if not self._stop.is_set():
                self._grace = max(grace, self._config.min_kill_grace)
                self._stop.set()

    # -- the pod's life --------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._live()
        except Exception:  # a bug here must not take the agent down; the log says which pod
            log.exception("pod %s: worker failed", self.key)
        finally:
            self.done.set()
            self._on_done(self)

    def _live(self) -> None:
        self._report("Pending")
        try:
            prepared = self._prepare()
            while True:
                code = self._run_container(prepared)
                if self._is_stopping() or not should_restart(self._policy(), code):
                    break
                self._back_off()
        except Stopped:
            pass
        self._finish()

    def _prepare(self) -> PreparedPod:
        """The pod materialized under its root; setup errors are retried with back-off."""
        attempt = 0
        while True:
            self._check_stop()
            try:
                return self._prepared()
            except PodSetupError as exc:
                attempt += 1
                again = exc.reason == "ErrImagePull" and attempt > 1
                self._c.state = waiting("ImagePullBackOff" if again else exc.reason, str(exc))
                self._report("Pending")
                self._sleep(restart_delay(attempt, **self._backoff()))

    def _prepared(self) -> PreparedPod:
        unsupported = _unsupported(self.pod)
        if unsupported:
            raise PodSetupError(unsupported)
        container = self.pod["spec"]["containers"][0]
        prepared = prepare_pod(
            self.pod,
            source=self._source,
            root=self.root,
            images=self._images(container),
            base_env=host_env(),
        )
        link_claims(self.pod, container, root=self.root, claims_root=self._config.claims_root)
        return dataclasses.replace(prepared, argv=(*_death_signal_prefix(), *prepared.argv))

    def _images(self, container: Obj) -> ImageMap:
        """The agent's image map; a container's own `command` stands in for its image."""
        images = self._config.images
        command = container.get("command")
        if not command:
            return images
        program = self._config.executables.get(command[0], command[0])
        commands = {**images.commands, container.get("image", ""): (program, *command[1:])}
        return dataclasses.replace(images, commands=commands)

    def _run_container(self, prepared: PreparedPod) -> int:
        """Start the container once, watch it to its end, and record how it ended."""
        self._check_stop()
        _clear(prepared.termination_path)
        started = rfc3339(self._config.now())
        with self._open_log():
            try:
                process = PodProcess(prepared, on_line=self._line, cwd=self._config.cwd)
            except OSError as exc:  # the runtime's StartError: the program cannot be executed
                finished = rfc3339(self._config.now())
                self._c.state = terminated(
                    128, "StartError", started_at=started, finished_at=finished, message=str(exc)
                )
                return 128
            self.pid = process.proc.pid
            self._c.container_id = f"local-process://{self.pid}"
            self._c.state = running(started)
            self._report("Running")
            self._supervise(process)
            ended = process.wait()
        message = ended.message or self._fallback_message(ended.exit_code)
        reason = "Completed" if ended.exit_code == 0 else "Error"
        finished = rfc3339(self._config.now())
        self._c.state = terminated(
            ended.exit_code, reason, started_at=started, finished_at=finished, message=message
        )
        return ended.exit_code

    def _supervise(self, process: PodProcess) -> None:
        """Wait for the process; once stopping, SIGTERM it, then SIGKILL its group."""
        kill_at: float | None = None
        while process.poll() is None:
            if kill_at is None and self._is_stopping():
                _signal(process.proc.pid, signal.SIGTERM, group=False)
                kill_at = time.monotonic() + self._grace
            if kill_at is not None and time.monotonic() >= kill_at:
                _signal(process.proc.pid, signal.SIGKILL, group=True)
            time.sleep(POLL)
        _signal(process.proc.pid, signal.SIGKILL, group=True)  # the container's leftovers

    def _back_off(self) -> None:
        """Between restarts: CrashLoopBackOff, then the same container again."""
        c = self._c
        c.restarts += 1
        c.last_state = c.state
        delay = restart_delay(c.restarts, **self._backoff())
        meta = self.pod["metadata"]
        c.state = waiting(
            "CrashLoopBackOff",
            f"back-off {delay:g}s restarting failed container={c.name} "
            f"pod={meta['name']}_{meta['namespace']}({self.uid})",
        )
        self._report("Running")
        self._sleep(delay)

    def _finish(self) -> None:
        """The last status: how the container ended (or that it never ran)."""
        c = self._c
        if "waiting" in c.state and "terminated" in c.last_state:  # stopped in back-off
            c.state, c.last_state = c.last_state, {}
        if "terminated" not in c.state:  # never started
            now = rfc3339(self._config.now())
            c.state = terminated(
                137,
                "ContainerStatusUnknown",
                started_at=self._start_time,
                finished_at=now,
                message=LOST_MESSAGE,
            )
        if self._deadline_exceeded:
            self._report("Failed", reason="DeadlineExceeded", message=DEADLINE_MESSAGE)
        else:
            self._report(phase_of([int(c.state["terminated"]["exitCode"])]))
        self._tail.clear()

    # -- stopping --------------------------------------------------------------------------
    def _is_stopping(self) -> bool:
        past = self._deadline is not None and time.monotonic() >= self._deadline
        if past and not self._stop.is_set():
            self._deadline_exceeded = True
            self._request_stop(self._spec_grace(), silent=False)
        return self._stop.is_set()

    def _check_stop(self) -> None:
        if self._is_stopping():
            raise Stopped

    def _sleep(self, seconds: float) -> None:
        """Sleep, woken by a stop request or the deadline (then Stopped)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self._check_stop()
            until_deadline = (self._deadline or end) - time.monotonic()
            self._stop.wait(max(0.0, min(left, until_deadline, 1.0)))
        self._check_stop()

    # -- small parts -----------------------------------------------------------------------
    def _report(self, phase: str, *, reason: str = "", message: str = "") -> None:
        if self._silent:
            return
        report = PodReport(phase, (self._c.report(),), self._start_time, reason, message)
        if not self._reporter.report(self.pod, report):
            self._request_stop(self._spec_grace(), silent=True)  # the pod is gone

    def _policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy") or "Always")

    def _spec_grace(self) -> float:
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    def _backoff(self) -> dict[str, float]:
        return {"base": self._config.restart_backoff, "cap": self._config.restart_backoff_max}

    def _fallback_message(self, exit_code: int) -> str:
        container = self.pod["spec"]["containers"][0]
        if exit_code == 0 or container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
            return ""
        text = "\n".join(self._tail)
        return text.encode()[-LOG_TAIL_BYTES:].decode(errors="replace")

    @contextlib.contextmanager
    def _open_log(self) -> Any:
        meta = self.pod["metadata"]
        folder = self._config.workdir / "logs" / f"{meta['namespace']}_{meta['name']}_{self.uid}"
        folder.mkdir(parents=True, exist_ok=True)
        self._tail.clear()
        with (folder / f"{self._c.name}-{self._c.restarts}.log").open("w") as handle:
            self._log = handle
            try:
                yield
            finally:
                with self._lock:
                    self._log = None

    def _line(self, stream: str, line: str) -> None:
        self._tail.append(line)
        with self._lock:
            if self._log is not None:
                self._log.write(f"{stream} {line}\n")
                self._log.flush()


def host_env() -> dict[str, str]:
    """The agent's environment minus what a pod sets itself."""
    return {k: v for k, v in os.environ.items() if k not in POD_OWN_ENV}


def _unsupported(pod: Obj) -> str:
    spec = pod["spec"]
    if spec.get("initContainers") or len(spec.get("containers") or []) != 1:
        return "the longrun node agent runs pods of exactly one container and no init containers"
    return ""


def _clear(path: Path) -> None:
    """A new container instance starts without its predecessor's termination message."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _signal(pid: int, sig: signal.Signals, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)  # PodProcess starts each container in a session of its own
        else:
            os.kill(pid, sig)


def _death_signal_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --`: a container dies with the thread that started it, so an
    agent killed outright leaves no process behind on a shared machine."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
