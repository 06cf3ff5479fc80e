"""Run a prepared pod's container as a local subprocess, the way a kubelet would.

`local.podspec` turns the pod spec into an argv, an env and files; this module
starts the process, streams its output line by line, stops it the kubelet's way
when the deadline passes or a stop is asked for (SIGTERM, then SIGKILL after the
pod's `terminationGracePeriodSeconds`), and reports the exit as the kubelet
does: exit code, reason, and the termination message the container wrote. A pod
that cannot start (unmapped image, missing Secret or key) ends without a
process, with the reason Kubernetes gives it.

The same `run_pod` serves `longrun run` (through `local.occurrence`); the test node
agent (`e2e/nodeagent`) runs pods with the same `prepare_pod` and process handling. Each
hands over a pod dict and a `VolumeSource` saying where ConfigMaps and Secrets come from.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from local.podspec import ImageMap, PodSetupError, PreparedPod, VolumeSource, prepare_pod

Obj = dict[str, Any]
LineSink = Callable[[str, str], None]  # (stream name "stdout"/"stderr", line without newline)


@dataclass(frozen=True)
class PodExit:
    """How a pod's container ended, as the kubelet reports it."""

    exit_code: int
    reason: str  # Completed, Error, DeadlineExceeded, CreateContainerConfigError...
    message: str = ""  # the termination message (or the setup error)


class PodProcess:
    """A started container process: its output goes line by line to `on_line`."""

    def __init__(self, prepared: PreparedPod, *, on_line: LineSink, cwd: Path | None) -> None:
        self.prepared = prepared
        self.proc = subprocess.Popen(
            prepared.argv,
            env=prepared.env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,  # Ctrl-C in the terminal reaches us, not the container
        )
        self._readers = [
            _pump(stream, name, on_line)
            for stream, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr"))
            if stream is not None
        ]
        self._reason: str | None = None

    def stop(self, *, reason: str = "Error") -> None:
        """SIGTERM now, SIGKILL after the grace period (safe to repeat)."""
        if self._reason is None:
            self._reason = reason
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            threading.Thread(target=self._kill_later, daemon=True).start()

    def _kill_later(self) -> None:
        try:
            self.proc.wait(self.prepared.grace_seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def poll(self) -> int | None:
        """The exit code when finished, else None."""
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> PodExit:
        """Wait for the process and its output; the pod's exit as the kubelet reports it."""
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join()
        code = 128 - code if code < 0 else code  # killed by signal N → 128+N, like a container
        return PodExit(code, self._reason or _reason(code), read_message(self.prepared))


def start_error(command: str, exc: OSError) -> str:
    """The message of a container that could not start (the kubelet's StartError)."""
    why = exc.strerror or type(exc).__name__
    return f'failed to start container: exec: "{command}": {why}'


def _reason(code: int) -> str:
    return "Completed" if code == 0 else "Error"


def _pump(stream: IO[str], name: str, on_line: LineSink) -> threading.Thread:
    def run() -> None:
        with stream:
            for line in stream:
                on_line(name, line.rstrip("\n"))

    thread = threading.Thread(target=run, name=f"pod-{name}", daemon=True)
    thread.start()
    return thread


def read_message(prepared: PreparedPod, *, limit: int = 4096) -> str:
    """The termination message the container wrote (kubelet keeps at most 4 KiB)."""
    try:
        return prepared.termination_path.read_bytes()[:limit].decode(errors="replace").strip()
    except OSError:
        return ""


def run_pod(
    pod: Obj,
    *,
    source: VolumeSource,
    root: Path,
    images: ImageMap,
    on_line: LineSink,
    cwd: Path | None = None,
    base_env: Mapping[str, str] | None = None,
    deadline: float | None = None,
    stop: threading.Event | None = None,
) -> PodExit:
    """Run a pod to its end (blocking); `deadline` is a time.monotonic() instant."""
    try:
        prepared = prepare_pod(
            pod, source=source, root=root, images=images, base_env=_base(base_env)
        )
    except PodSetupError as exc:
        return PodExit(1, exc.reason, str(exc))
    try:
        process = PodProcess(prepared, on_line=on_line, cwd=cwd)
    except OSError as exc:  # the command is not there, or not executable: as a kubelet says it
        return PodExit(128, "StartError", start_error(prepared.argv[0], exc))
    while process.poll() is None:
        if deadline is not None and time.monotonic() >= deadline:
            process.stop(reason="DeadlineExceeded")
        if stop is not None and stop.is_set():
            process.stop(reason="Stopped")
        time.sleep(0.05)
    return process.wait()


def _base(env: Mapping[str, str] | None) -> dict[str, str]:
    """The host environment minus what a pod sets itself (PATH, HOME, proxies stay)."""
    base = dict(os.environ if env is None else env)
    for name in ("CONTRACT_PATH", "TERMINATION_MESSAGE_PATH", "JOB_NAME", "POD_UID"):
        base.pop(name, None)
    return base
