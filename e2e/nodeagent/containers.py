"""A pod's containers on this machine: one file tree for the pod, an argv and env for each.

The containers of a pod share its volumes. Here the pod is one directory,
`<workdir>/pods/<namespace>/<pod>-<uid>/`, and every container sees it as its root: a
volume lives at its mount path under that directory (`local.podspec.local_path`), so the
model cache the init container fills is the directory the runtime reads, and the key files
of a Secret volume are where nginx and llama.cpp look. The same volume mounted at two paths
is one directory (the second path links to the first); two volumes at one path in two
containers cannot share one tree and are refused (`CreateContainerConfigError`).

Paths a container is given in its `command`, `args` and env values that lie under one of
its mounts are moved under the pod's directory, as the container would see them. The
mount at `/tmp` is the exception (as in `local.podspec`): this machine's /tmp is shared,
and test paths live there; `TMPDIR` names the pod's instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from local.podspec import (
    PodSetupError,
    VolumeSource,
    container_env,
    has_files,
    local_path,
    write_volume,
)

from .source import link_claims, tolerant

Obj = dict[str, Any]
SCRATCH = "/tmp"


@dataclass(frozen=True)
class ContainerFiles:
    """What one container starts with: its env and where its termination message goes."""

    env: dict[str, str]
    termination_path: Path
    mounts: tuple[str, ...]  # mount paths whose values are localized


def all_containers(pod: Obj) -> list[Obj]:
    """Init containers, in order, then the containers."""
    spec = pod["spec"]
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def write_pod_volumes(pod: Obj, *, source: VolumeSource, root: Path, claims_root: Path) -> None:
    """Every mounted volume under the pod's fresh `root`; PodSetupError when one cannot be."""
    shutil.rmtree(root, ignore_errors=True)  # a new pod starts from fresh volumes
    root.mkdir(parents=True)
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    at_path: dict[str, str] = {}  # mount path → volume name
    first_path: dict[str, str] = {}  # volume name → its first mount path
    for container in all_containers(pod):
        for mount in container.get("volumeMounts") or []:
            name, path = mount["name"], mount["mountPath"]
            volume = volumes.get(name)
            if volume is None:
                raise PodSetupError(f"volumeMount {name!r} names no volume")
            if at_path.setdefault(path, name) != name:
                raise PodSetupError(
                    f"mount path {path} is volume {at_path[path]!r} in one container and "
                    f"{name!r} in another: the node agent runs a pod in one file tree"
                )
            target = local_path(root, path)
            shared = first_path.setdefault(name, path)
            if shared != path and not has_files(volume) and not mount.get("subPath"):
                _link(target, local_path(root, shared))
                continue
            write_volume(
                tolerant(volume),
                target=target,
                sub_path=mount.get("subPath"),
                source=source,
                pod=pod,
            )
    for container in all_containers(pod):
        link_claims(pod, container, root=root, claims_root=claims_root)


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def container_files(
    pod: Obj,
    container: Obj,
    *,
    source: VolumeSource,
    root: Path,
    base_env: Mapping[str, str],
    pod_ip: str,
) -> ContainerFiles:
    """The container's env (its references resolved, its paths localized; `status.podIP`
    is the pod's own address) and message file."""
    mounts = tuple(
        m["mountPath"]
        for m in container.get("volumeMounts") or []
        if m["mountPath"].rstrip("/") != SCRATCH
    )
    env = dict(base_env)
    own = container_env(pod, container=container, source=source)
    for var in container.get("env") or []:
        field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field in ("status.podIP", "status.podIPs"):
            own[var["name"]] = pod_ip
    env.update({k: localize(v, mounts=mounts, root=root) for k, v in own.items()})
    message = root / ".kubelet" / container["name"] / "termination-log"
    message.parent.mkdir(parents=True, exist_ok=True)
    env["TERMINATION_MESSAGE_PATH"] = str(message)
    if local_path(root, SCRATCH).is_dir():
        env["TMPDIR"] = str(local_path(root, SCRATCH))
    return ContainerFiles(env, message, mounts)


def localize(value: str, *, mounts: Iterable[str], root: Path) -> str:
    """`value` (a path, or `--flag=path`) moved under `root` when it lies under a mount."""
    flag, sep, rest = value.partition("=")
    if sep and flag.startswith("-"):
        return f"{flag}={localize(rest, mounts=mounts, root=root)}"
    for mount in sorted(mounts, key=len, reverse=True):
        if value == mount or value.startswith(mount.rstrip("/") + "/"):
            return str(local_path(root, value))
    return value


def localize_argv(argv: Iterable[str], *, files: ContainerFiles, root: Path) -> tuple[str, ...]:
    """Each argument localized against the container's mounts."""
    return tuple(localize(str(a), mounts=files.mounts, root=root) for a in argv)


def clear(path: Path) -> None:
    """A new container instance starts without its predecessor's termination message."""
    if path.exists():
        os.unlink(path)
