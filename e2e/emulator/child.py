"""The emulator in a child process, for measurements: its CPU is then its own.

`python -m e2e.emulator.child [--summary JSON]` starts an emulator, and a node agent in a
process of its own (so that its CPU is not the emulator's) that runs every pod as a scripted
container exiting 0, with `--summary` as its termination message when given; it prints the
emulator's URL and kubeconfig path on one line, and answers commands on stdin, one line
each, until stdin closes:

- `cpu`: user and system CPU seconds of the process so far;
- `idle`: `ok` once the built-in controllers have nothing queued and every watch stream has
  taken its events (`busy` after two minutes).

`Child` is the parent's side. Used by `e2e/emulator/loadtest.py` and `bench/controller_bench.py`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def serve(summary: str | None) -> int:
    """The child: serve and answer commands until stdin closes."""
    from e2e.emulator import Emulator, EmulatorConfig

    emu = Emulator(EmulatorConfig()).start()
    agent = _start_agent(emu.kubeconfig_path, emu.workdir, summary or "")
    print(emu.url, emu.kubeconfig_path, flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "cpu":
            t = os.times()
            print(t.user, t.system, flush=True)
        elif cmd == "idle":
            print("ok" if _idle(emu) else "busy", flush=True)
    agent.terminate()
    agent.wait(timeout=30)
    emu.stop()
    return 0


def _start_agent(kubeconfig: Path, workdir: Path, message: str) -> subprocess.Popen[bytes]:
    """`python -m e2e.nodeagent --scripted MESSAGE`, awaited until its Node is registered."""
    ready = workdir / "nodeagent.ready"
    argv = [sys.executable, "-m", "e2e.nodeagent", "--kubeconfig", str(kubeconfig)]
    argv += ["--workdir", str(workdir / "node"), "--ready-file", str(ready)]
    argv += ["--log-level", "WARNING", f"--scripted={message}"]
    root = Path(__file__).resolve().parents[2]
    agent = subprocess.Popen(argv, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 60
    while not ready.exists():
        if agent.poll() is not None or time.monotonic() > deadline:
            agent.kill()
            raise RuntimeError("the node agent did not start (see its output above)")
        time.sleep(0.05)
    return agent


def _idle(emu: Any, timeout: float = 120.0) -> bool:
    """Controllers have nothing queued and every watch stream has taken its events."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if emu.wait_idle(1.0) and all(w.queue.empty() for w in emu.open_watches()):
            return True
        time.sleep(0.01)  # polling must not eat the CPU being measured
    return False


class Child:
    """The emulator process and its stdin/stdout command channel."""

    def __init__(self, *, summary: str | None = None) -> None:
        cmd = [sys.executable, "-m", "e2e.emulator.child"]
        if summary is not None:
            cmd += ["--summary", summary]
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root, env=env
        )
        assert self.proc.stdout is not None
        self.url, self.kubeconfig_path = self.proc.stdout.readline().split()

    def ask(self, cmd: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def cpu(self) -> tuple[float, float]:
        """(user, system) CPU seconds of the emulator process so far."""
        user, system = self.ask("cpu").split()
        return float(user), float(system)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m e2e.emulator.child", description=__doc__)
    parser.add_argument("--summary", help="termination message of every pod (exit code 0)")
    sys.exit(serve(parser.parse_args().summary))
