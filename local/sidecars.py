"""What runs beside a ModelDeployment's server here: the nginx auth sidecar on this machine's
nginx, with the rendered nginx.conf moved to local addresses and paths (`longrun serve` and the
node agent both use it)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from controller.core.serving.runtimes import KEYS_MOUNT, LOOPBACK
from local.podspec import local_path


class ServeError(Exception):
    """The deployment cannot be served here (its message says why)."""


def nginx_binary() -> str:
    """The nginx that runs the auth sidecar here; ServeError when there is none."""
    found = shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None
    )
    if found is None:
        raise ServeError(
            "this runtime's API keys are checked by an nginx sidecar, and nginx is not installed "
            "(apt-get install nginx-light)"
        )
    return found


def local_nginx_conf(
    text: str, *, root: Path, host: str = LOOPBACK, ports: Mapping[int, int] | None = None
) -> str:
    """The rendered nginx.conf with this machine's addresses and paths (keys, pid, temp dirs).

    In a pod, nginx listens on every address and reaches the runtime on the pod's own
    127.0.0.1; here each `listen PORT` binds `host` and the upstream 127.0.0.1 becomes
    `host` (the node agent gives each pod an address of its own), and `ports` moves ports
    (`longrun serve` picks free ones)."""
    moved = ports or {}
    tmp = local_path(root, "/tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    keys = local_path(root, KEYS_MOUNT)
    out = text.replace(" /tmp/", f" {tmp}/")  # first: the local paths may be under /tmp

    def address(match: re.Match[str]) -> str:
        port = int(match[2])
        listen = "listen " if match[1] == "listen " else ""
        return f"{listen}{host}:{moved.get(port, port)}"

    out = re.sub(rf"(listen |{re.escape(LOOPBACK)}:)(\d+)", address, out)
    return out.replace(f"{KEYS_MOUNT}/", f"{keys}/")
