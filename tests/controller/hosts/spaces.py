"""Stand-in daemons (standins.py) in network namespaces of their own (e2e/netns.py).

The controller refuses loopback addresses for a host, so a stand-in must listen on a real
address: each one runs as a process inside a namespace reached at 198.18.N.2. Skips with
one line where namespaces cannot be made (not root); fails instead in CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e import netns
from tests.support import REPO_ROOT

PORT = 11434


@dataclass
class StandIn:
    """A running stand-in: where it listens and what it was asked."""

    space: netns.NetworkHost
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def endpoint(self) -> str:
        return f"http://{self.space.address}:{PORT}"

    def requests(self) -> list[dict[str, Any]]:
        """Every request so far: method, path, whether it carried the token."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


def require_namespaces() -> None:
    """Skip (fail in CI) where network namespaces cannot be made."""
    from e2e.peers.fixtures import skip_or_fail

    if (why := netns.unavailable()) is not None:
        skip_or_fail(f"stand-in hosts need network namespaces: {why}")


@contextlib.contextmanager
def stand_in(
    index: int, kind: str, *, library: list[str], workdir: Path, token: str | None = None
) -> Iterator[StandIn]:
    """A stand-in of `kind` (ollama, inferenced) in namespace `index`, until the block ends."""
    require_namespaces()
    log = workdir / f"standin-{index}.jsonl"
    with netns.NetworkHost(index) as space:
        argv = [*space.prefix, sys.executable, "-m", "tests.controller.hosts.standins", kind]
        argv += ["--host", space.address, "--port", str(PORT), "--library", ",".join(library)]
        argv += ["--log", str(log), *(["--token", token] if token else [])]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        process = subprocess.Popen(argv, cwd=REPO_ROOT, env=env)
        running = StandIn(space, process, log)
        try:
            _await(space.address, process)
            yield running
        finally:
            running.stop()


def _await(address: str, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the stand-in exited with {process.returncode}"
        with contextlib.suppress(OSError), socket.create_connection((address, PORT), 0.5):
            return
        time.sleep(0.1)
    raise AssertionError(f"the stand-in did not listen on {address}:{PORT} within {timeout}s")
