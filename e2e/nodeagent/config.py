"""What one node agent is: its node's name and size, what it serves, how it runs images.

The defaults are a kubelet's where timing is observable by the control plane
(a 40 s node Lease renewed every 10 s, restart back-off from 10 s doubling to
5 min, at least 2 s to stop a force-deleted pod); tests shorten the back-off.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from controller.core.settings import DEFAULT_IMAGE
from local.podspec import ImageMap

from .logs import KubeletTLS

if TYPE_CHECKING:
    from .scripted import ScriptedPods

DEFAULT_NODE_NAME = "longrun-node"
DEFAULT_SCHEDULER = "default-scheduler"
# Krateo's runner images run our runner: it reads the same contract keys and storage shapes
# (the same mapping e2e/system.py gives the emulator's executor).
KRATEO_RUNNER = "ghcr.io/krateoplatformops/kserve-krateo-runner-test"
# A container's own `command` runs on this machine; these names mean this Python.
PYTHON_NAMES = ("python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}")


def default_images(extra: Mapping[str, tuple[str, ...]] | None = None) -> ImageMap:
    """The runner image (any tag) and Krateo's runner as our runner; `extra` IMAGE=COMMAND."""
    commands = {KRATEO_RUNNER: ImageMap.runner_command, **(extra or {})}
    return ImageMap(DEFAULT_IMAGE, commands=commands)


def default_capacity() -> dict[str, str]:
    """This machine's CPUs and memory, and the kubelet's default of 110 pods."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu": str(os.cpu_count() or 1), "memory": f"{memory // 1024}Ki", "pods": "110"}


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class AgentConfig:
    """One agent's settings; `namespaces=None` serves every namespace."""

    workdir: Path
    node_name: str = DEFAULT_NODE_NAME
    namespaces: tuple[str, ...] | None = None
    images: ImageMap = field(default_factory=default_images)
    # argv[0] of a container's `command` → the local program (`python` → this Python).
    executables: Mapping[str, str] = field(
        default_factory=lambda: dict.fromkeys(PYTHON_NAMES, sys.executable)
    )
    capacity: Mapping[str, str] = field(default_factory=default_capacity)
    scheduler_names: tuple[str, ...] = (DEFAULT_SCHEDULER,)
    # Where a PersistentVolumeClaim's data lives: <pvc_root>/<namespace>/<claimName>.
    pvc_root: Path | None = None
    cwd: Path | None = None
    lease_seconds: int = 40
    renew_seconds: float = 10.0
    restart_backoff: float = 10.0
    restart_backoff_max: float = 300.0
    min_kill_grace: float = 2.0
    # On shutdown every process gets at most this long after SIGTERM before SIGKILL.
    shutdown_grace: float = 5.0
    now: Callable[[], datetime] = utc_now
    hostname: str = field(default_factory=socket.gethostname)
    # The kubelet's HTTPS server (container logs for `pods/log`); None: a self-signed
    # certificate, anonymous clients. Port 0 picks a free one (the Node's `daemonEndpoints`).
    kubelet_tls: KubeletTLS | None = None
    kubelet_port: int = 0
    # Containers whose outcome a test scripts (scripted.py) instead of running their image.
    scripted: ScriptedPods | None = None

    @property
    def claims_root(self) -> Path:
        return self.pvc_root or self.workdir / "pvc"

    def serves(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces
