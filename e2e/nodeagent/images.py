"""Which local program stands in for a container's image.

A container that `config.scripted` takes runs the test's scripted program (scripted.py).
Otherwise, in order (an image with an `--image-map IMAGE=COMMAND` entry skips 1 and 2):
1. A ModelDeployment's runtime image (the chart's `SERVING_IMAGE_*` values, read from the
   same environment as the controller, any tag): `local.runtimes.local_server`, the one
   mapping `longrun serve` uses too, given the pod's address as the server's host and the
   container's own port. The translated container replaces the rendered one, probes
   included (llama-cpp-python answers no path without the key: its probes check the port).
2. The auth sidecar's nginx image: this machine's nginx on a copy of the mounted
   nginx.conf with the pod's address and paths (`local.deployment.local_nginx_conf`).
3. A container with its own `command`: that command on this machine (`python` is this
   Python; `longrun-fetch`, the model download, and `longrun-token-check`, the token
   verifier, are `python -m runners.…` when they are not on the PATH), with a `--listen` on
   loopback moved to the pod's address.
4. The agent's image map (the runner image, `--image-map` entries).
No match: `ErrImagePull`, retried with back-off as for an image that cannot be pulled.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.core.serving.layout import SOURCE_MOUNT
from controller.core.serving.runtimes import LOOPBACK, ServingImages
from controller.core.serving.settings import serving_settings_from_env
from local.deployment import ServeError, local_nginx_conf, nginx_binary
from local.podspec import PodSetupError, image_repository, local_path
from local.runtimes import RuntimeUnavailable, http_port, local_server, runtime_of_image

from .config import AgentConfig

Obj = dict[str, Any]
# The project's console scripts, for an agent whose PATH lacks the virtualenv's bin.
PROJECT_COMMANDS = {
    "longrun-fetch": ("-m", "runners.fetch"),
    "longrun-token-check": ("-m", "runners.tokencheck"),
}


@dataclass(frozen=True)
class Launch:
    """A container as a local process: the local program (`prefix`, a host path), the
    container's own arguments (`args`, paths as the container knows them), the container as
    run (probes included), and environment the program needs besides the container's own."""

    prefix: tuple[str, ...]
    args: tuple[str, ...]
    container: Obj
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def serving_images() -> ServingImages:
    """The runtime images the controller renders, from the same environment it reads."""
    return serving_settings_from_env().images


def launch(
    container: Obj, *, pod: Obj, root: Path, host: str, config: AgentConfig, images: ServingImages
) -> Launch:
    """The local program for `container`; PodSetupError (ErrImagePull) when there is none."""
    if config.scripted is not None and config.scripted.takes(container):
        argv, run = config.scripted.command(container, pod=pod)
        return Launch(argv, (), run)
    image = str(container.get("image") or "")
    mapped = image in config.images.commands or image_repository(image) in config.images.commands
    kind = None if mapped else runtime_of_image(image, images)
    try:
        if kind == "auth-proxy":
            return _nginx(container, root=root, host=host)
        if kind is not None:
            return _runtime(kind, container, pod=pod, host=host)
    except (RuntimeUnavailable, ServeError, OSError, KeyError) as exc:
        raise PodSetupError(f"image {image!r}: {exc}", reason="ErrImagePull") from None
    command = container.get("command")
    if command:
        args = (*command[1:], *_on_pod_address(_args(container), host))
        env = fetch_env(root) if command[0] == "longrun-fetch" else {}
        return Launch(_program(command[0], config), args, container, env)
    return Launch(config.images.command_for(image), tuple(_args(container)), container)


def _on_pod_address(args: list[str], host: str) -> list[str]:
    """A helper container's `--listen 127.0.0.1:PORT` (the token verifier) on the pod's own
    address: every pod here shares the machine's loopback, and its nginx.conf is moved the same
    way (`local_nginx_conf`)."""
    loopback = f"{LOOPBACK}:"
    return [
        f"{host}:{a[len(loopback) :]}" if prev == "--listen" and a.startswith(loopback) else a
        for prev, a in zip(["", *args], args, strict=False)
    ]


def _args(container: Obj) -> list[str]:
    return [str(a) for a in container.get("args") or []]


def _program(name: str, config: AgentConfig) -> tuple[str, ...]:
    if name in config.executables:
        return (config.executables[name],)
    if name in PROJECT_COMMANDS and shutil.which(name) is None:
        return (sys.executable, *PROJECT_COMMANDS[name])
    return (name,)


def _runtime(kind: str, container: Obj, *, pod: Obj, host: str) -> Launch:
    port = http_port(container)
    served = _triton_name(pod, container) if kind == "triton" else None
    volumes = pod["spec"].get("volumes") or []
    server = local_server(
        kind, container, volumes=volumes, host=host, port=port, pythons={}, served_name=served
    )
    return Launch(server.prefix, tuple(_args(server.container)), server.container, dict(server.env))


def _triton_name(pod: Obj, container: Obj) -> str | None:
    """The served name: the directory the download puts the model in, under the repository."""
    repository = next(
        (a.split("=", 1)[1] for a in _args(container) if a.startswith("--model-repository=")),
        "",
    )
    for init in pod["spec"].get("initContainers") or []:
        for arg in _args(init):
            if repository and arg.startswith(repository + "/"):
                return arg[len(repository) + 1 :].split("/", 1)[0]
    return None


def _nginx(container: Obj, *, root: Path, host: str) -> Launch:
    """nginx on the mounted nginx.conf, rewritten for the pod's address and files."""
    argv = [*(container.get("command") or ["nginx"])[1:], *_args(container)]
    conf = argv[argv.index("-c") + 1]
    local = local_path(root, conf)
    rewritten = local.with_name(f".local-{local.name}")
    rewritten.write_text(local_nginx_conf(local.read_text(), root=root, host=host))
    argv[argv.index("-c") + 1] = str(rewritten)  # already this machine's: not localized again
    return Launch((nginx_binary(), "-e", "stderr", *argv), (), container)


def fetch_env(root: Path) -> dict[str, str]:
    """`longrun-fetch` finds pvc:// claims under LONGRUN_PVC_ROOT (in a pod, /mnt/source)."""
    return {"LONGRUN_PVC_ROOT": str(local_path(root, SOURCE_MOUNT))}
