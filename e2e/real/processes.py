"""One control-plane process: started with its log in a file, awaited, stopped by pid.

Why so careful about stopping: a test session that dies must not leave an etcd
and a kube-apiserver holding ports and CPU on a shared 2-core machine. So each
process is stopped by its own pid (SIGTERM, then SIGKILL after a grace period,
never by name), and where util-linux's `setpriv` exists the kernel kills it too
when the Python process that started it dies without cleaning up (SIGKILL,
a CI timeout's SIGTERM): `setpriv --pdeathsig KILL` sets that and then execs
the binary, so the pid we hold is the binary's. The death signal is tied to the
starting *thread*: start control planes from a thread that outlives them.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

POLL = 0.05


class StartupError(RuntimeError):
    """A process did not become ready; the message names it and ends with its log's tail."""


class ManagedProcess:
    """A child process with its output in `log_path`."""

    def __init__(self, name: str, argv: list[str], *, log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def is_running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def start(self, *, env: dict[str, str] | None = None) -> ManagedProcess:
        """Start the process (its own session, so a terminal's Ctrl-C reaches only us)."""
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                [*_death_signal_prefix(), *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        return self

    def wait_ready(self, probe: Callable[[], bool], *, timeout: float) -> float:
        """Poll `probe` until true; seconds taken. StartupError on exit or timeout."""
        started = time.monotonic()
        while True:
            if self._popen is None or self._popen.poll() is not None:
                code = None if self._popen is None else self._popen.returncode
                raise StartupError(self._failure(f"exited with code {code} before it was ready"))
            if _safe(probe):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise StartupError(self._failure(f"not ready after {timeout:g}s"))
            time.sleep(POLL)

    def stop(self, *, grace: float) -> float:
        """SIGTERM, then SIGKILL after `grace` seconds; seconds taken. Safe to repeat."""
        popen, started = self._popen, time.monotonic()
        if popen is None or popen.poll() is not None:
            return 0.0
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
        return time.monotonic() - started

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of the process's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _failure(self, what: str) -> str:
        return f"{self.name} {what}; last lines of {self.log_path}:\n{self.log_tail()}"


def _safe(probe: Callable[[], bool]) -> bool:
    try:
        return bool(probe())
    # Connection refused, TLS not up yet, HTTP errors (URLError is an OSError), half a body.
    except (OSError, ValueError):
        return False


def _death_signal_prefix() -> list[str]:
    """`setpriv --pdeathsig KILL --` when available (see the module docstring), else nothing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
