"""What a pod spec means on this machine: the argv, env and files of its first container.

Why a pod spec and not a contract: `longrun run` must execute what the
controller renders (`build_pod_template`), so that a run that works locally
works in the cluster. Only the pod is read: its image (mapped to a local
command by `ImageMap`), its env (`value`, `secretKeyRef`, `configMapKeyRef`,
downward-API `fieldRef`), its volumes (ConfigMap and Secret volumes
materialized as files, emptyDirs as directories) and its termination message
path. `prepare_pod` turns all of it into a `PreparedPod`; starting and
watching the process is `local.executor`'s part.

A `projected` volume is materialized from its sources: `configMap` and `secret` (items and
`optional` as in a volume of their own), `downwardAPI` (`fieldRef` items) and
`serviceAccountToken` (a TokenRequest the `VolumeSource` makes, bound to the pod). A token
is written once, when the pod starts: the kubelet rewrites it at 80 % of its lifetime, a
local pod keeps the first (tests and local runs end long before it expires). Any other
source (clusterTrustBundle, podCertificate) is a PodSetupError naming it.

The local user cannot write `/etc/longrun` or `/var/run/longrun`, so every
mount path is rewritten under a per-pod root directory (`local_path`), and env
values and args naming a path under a mount are rewritten the same way (args after
Kubernetes' `$(VAR)` expansion). Secret files get
mode 0600 (the pod's fsGroup-owned 0440 has no local meaning: only the current
user may read them).

ConfigMaps and Secrets come from a `VolumeSource`: plain dicts for `longrun run`
(`MappingSource`), the API server for the test node agent (`e2e/nodeagent`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar

Obj = dict[str, Any]
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
T = TypeVar("T")
_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class PodSetupError(Exception):
    """The pod cannot start (unmapped image, missing Secret or key): Kubernetes' *ConfigError."""

    def __init__(self, message: str, *, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.reason = reason


class VolumeSource(Protocol):
    """Where a pod's ConfigMaps and Secrets come from (a namespace's worth)."""

    def config_map(self, name: str) -> Mapping[str, str] | None:
        """The ConfigMap's `data`, or None when it does not exist."""
        ...

    def secret(self, name: str) -> Mapping[str, bytes] | None:
        """The Secret's decoded `data`, or None when it does not exist."""
        ...

    def service_account_token(self, pod: Obj, *, audience: str | None, seconds: int) -> str:
        """A token of the pod's ServiceAccount (`spec.serviceAccountName`, else `default`)
        for `audience`, bound to the pod; PodSetupError when none can be had."""
        ...


@dataclass
class MappingSource:
    """A VolumeSource over plain dicts (what `longrun run` builds from its files)."""

    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    secrets: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def config_map(self, name: str) -> Mapping[str, str] | None:
        return self.config_maps.get(name)

    def secret(self, name: str) -> Mapping[str, bytes] | None:
        return self.secrets.get(name)

    def service_account_token(self, pod: Obj, *, audience: str | None, seconds: int) -> str:
        raise PodSetupError(
            "projected serviceAccountToken: a pod on this machine has no cluster to issue it a "
            "ServiceAccount token; a local run authenticates with a key Secret "
            "(model.auth.secretRef) instead"
        )


def image_repository(image: str) -> str:
    """`image` without its tag or digest (`host:5000/a/b:1.2@sha256:..` → `host:5000/a/b`)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


@dataclass(frozen=True)
class ImageMap:
    """Which local command stands in for a container image.

    The built-in runner image (any tag of it) is the runner in this Python;
    other images need an explicit `IMAGE=COMMAND` entry, exact or tag-less.
    """

    runner_image: str
    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    runner_command: tuple[str, ...] = (sys.executable, "-m", "runners")

    def command_for(self, image: str) -> tuple[str, ...]:
        """The argv prefix for `image`; PodSetupError (ErrImagePull) when unmapped."""
        for key in (image, image_repository(image)):
            if key in self.commands:
                return self.commands[key]
        if image_repository(image) == image_repository(self.runner_image):
            return self.runner_command
        raise PodSetupError(
            f"image {image!r} has no local command: map it with --image-map {image}=COMMAND "
            f"(the built-in runner image is {image_repository(self.runner_image)}:<any tag>)",
            reason="ErrImagePull",
        )


def parse_image_map(entries: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """`IMAGE=COMMAND` strings (COMMAND split like a shell) as a dict; ValueError if malformed."""
    commands: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        image, sep, command = entry.partition("=")
        argv = tuple(shlex.split(command))
        if not sep or not image.strip() or not argv:
            raise ValueError(f"--image-map {entry!r}: expected IMAGE=COMMAND")
        commands[image.strip()] = argv
    return commands


def local_path(root: Path, pod_path: str) -> Path:
    """Where an absolute in-pod path lives on this machine: under `root`."""
    return root.joinpath(*PurePosixPath(pod_path).relative_to("/").parts)


@dataclass(frozen=True)
class PreparedPod:
    """A pod ready to start: argv, env, and where its termination message will be."""

    argv: tuple[str, ...]
    env: dict[str, str]
    root: Path
    termination_path: Path
    grace_seconds: float


def prepare_pod(
    pod: Obj, *, source: VolumeSource, root: Path, images: ImageMap, base_env: Mapping[str, str]
) -> PreparedPod:
    """Materialize the pod's first container under `root`; PodSetupError if it cannot start."""
    container = pod["spec"]["containers"][0]
    prefix = images.command_for(container.get("image", ""))
    shutil.rmtree(root, ignore_errors=True)  # a new pod starts from fresh volumes
    root.mkdir(parents=True)
    mounts = materialize_mounts(pod, container=container, source=source, root=root)
    term_pod_path = container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
    term = local_path(root, term_pod_path)
    term.parent.mkdir(parents=True, exist_ok=True)
    own = container_env(pod, container=container, source=source)
    env = {**base_env, **own}
    env = {k: rewrite_path(v, mounts=mounts, root=root) for k, v in env.items()}
    # As the kubelet does: `$(VAR)` in args expands to the container's own variables; an
    # arg naming a path under a mount is rewritten as env values are.
    own_env = {k: env[k] for k in own}
    args = [expand_refs(str(a), own_env) for a in container.get("args", [])]
    argv = (*prefix, *(rewrite_path(a, mounts=mounts, root=root) for a in args))
    env["TERMINATION_MESSAGE_PATH"] = str(term)
    if local_path(root, "/tmp").is_dir():
        env["TMPDIR"] = str(local_path(root, "/tmp"))
    grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
    return PreparedPod(argv, env, root, term, grace)


def rewrite_path(value: str, *, mounts: Iterable[str], root: Path) -> str:
    """`value` moved under `root` when it is a path at or below one of the mount paths."""
    for mount in mounts:
        if value == mount or value.startswith(mount.rstrip("/") + "/"):
            return str(local_path(root, value))
    return value


def materialize_mounts(pod: Obj, *, container: Obj, source: VolumeSource, root: Path) -> list[str]:
    """Write every mounted volume's files under `root`; returns the paths env may point into.

    Only ConfigMap and Secret mounts count: an emptyDir such as `/tmp` is a scratch
    directory (TMPDIR points there), and rewriting every `/tmp/...` value the user
    passes would surprise more than it helps on a machine whose /tmp is shared.
    """
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    paths = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None:
            raise PodSetupError(f"volumeMount {mount['name']!r} names no volume")
        target = local_path(root, mount["mountPath"])
        write_volume(volume, target=target, sub_path=mount.get("subPath"), source=source, pod=pod)
        if has_files(volume):
            paths.append(mount["mountPath"])
    return paths


def has_files(volume: Obj) -> bool:
    """True for the volume kinds whose files come from the API (not a scratch directory)."""
    return "configMap" in volume or "secret" in volume or "projected" in volume


def write_volume(
    volume: Obj,
    *,
    target: Path,
    sub_path: str | None,
    source: VolumeSource,
    pod: Obj | None = None,
) -> None:
    """Files of one volume at `target` (only `sub_path` of it, when given)."""
    files = volume_files(volume, source=source, pod=pod)
    if files is None:  # emptyDir and anything without files of its own
        target.mkdir(parents=True, exist_ok=True)
        return
    secret = "secret" in volume or "projected" in volume  # a token or Secret keys: 0600
    if sub_path is not None:
        if sub_path not in files:
            raise PodSetupError(f"volume {volume['name']!r} has no key {sub_path!r} (subPath)")
        _write_file(target, files[sub_path], secret=secret)
        return
    for rel, content in files.items():
        _write_file(target / rel, content, secret=secret)


def volume_files(
    volume: Obj, *, source: VolumeSource, pod: Obj | None = None
) -> dict[str, bytes] | None:
    """Relative path → content of a ConfigMap, Secret or projected volume; None for other
    kinds. A projected volume's `serviceAccountToken` needs the `pod` it is bound to."""
    if "projected" in volume:
        files: dict[str, bytes] = {}
        for projection in volume["projected"].get("sources") or []:
            files.update(_projected(projection, volume=volume, source=source, pod=pod or {}))
        return files
    return _object_files(volume, source=source)


def _projected(projection: Obj, *, volume: Obj, source: VolumeSource, pod: Obj) -> dict[str, bytes]:
    """The files of one source of a projected volume."""
    if "serviceAccountToken" in projection:
        spec = projection["serviceAccountToken"]
        seconds = int(spec.get("expirationSeconds") or 3600)
        token = source.service_account_token(pod, audience=spec.get("audience"), seconds=seconds)
        return {spec["path"]: token.encode()}
    if "downwardAPI" in projection:
        items = projection["downwardAPI"].get("items") or []
        return {item["path"]: _downward(pod, item).encode() for item in items}
    for kind in ("configMap", "secret"):
        if kind in projection:
            found = _object_files({"name": volume["name"], kind: projection[kind]}, source=source)
            return found or {}
    raise PodSetupError(
        f"volume {volume['name']!r}: projected source {sorted(projection)} is not supported by "
        "the node agent (it writes configMap, secret, downwardAPI and serviceAccountToken)"
    )


def _downward(pod: Obj, item: Obj) -> str:
    if "fieldRef" not in item:
        raise PodSetupError(f"downwardAPI item {item.get('path')!r}: only fieldRef is supported")
    return field_value(pod, item["fieldRef"]["fieldPath"])


def _object_files(volume: Obj, *, source: VolumeSource) -> dict[str, bytes] | None:
    if "configMap" in volume:
        spec, kind = volume["configMap"], "ConfigMap"
        found = source.config_map(spec["name"])
        data = None if found is None else {k: v.encode() for k, v in found.items()}
    elif "secret" in volume:
        spec, kind = volume["secret"], "Secret"
        spec = {**spec, "name": spec.get("secretName", spec.get("name", ""))}
        data = None if (raw := source.secret(spec["name"])) is None else dict(raw)
    else:
        return None
    if data is None:
        if spec.get("optional"):
            return {}
        raise PodSetupError(f"{kind} {spec['name']!r} not found (volume {volume['name']!r})")
    items = spec.get("items")
    if not items:
        return data
    return {item["path"]: _item(data, item["key"], kind=kind, name=spec["name"]) for item in items}


def _item(data: Mapping[str, bytes], key: str, *, kind: str, name: str) -> bytes:
    if key not in data:
        raise PodSetupError(f"{kind} {name!r} has no key {key!r}")
    return data[key]


def _write_file(path: Path, content: bytes, *, secret: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    if secret:
        os.chmod(path, 0o600)  # the umask cannot widen it, but an old file might be wider


def container_env(pod: Obj, *, container: Obj, source: VolumeSource) -> dict[str, str]:
    """The container's env: literal values, `secretKeyRef`, `configMapKeyRef`, `fieldRef`."""
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        value = env_value(var, pod=pod, source=source, env=env)
        if value is not None:
            env[var["name"]] = value
    return env


def env_value(var: Obj, *, pod: Obj, source: VolumeSource, env: Mapping[str, str]) -> str | None:
    """One env var's value (None: an optional reference that is absent)."""
    value_from = var.get("valueFrom")
    if value_from is None:
        return expand_refs(str(var.get("value", "")), env)
    if "fieldRef" in value_from:
        return field_value(pod, value_from["fieldRef"]["fieldPath"])
    if "secretKeyRef" in value_from:
        ref = value_from["secretKeyRef"]
        raw = _lookup(source.secret(ref["name"]), ref, kind="Secret")
        return None if raw is None else raw.decode()
    if "configMapKeyRef" in value_from:
        ref = value_from["configMapKeyRef"]
        return _lookup(source.config_map(ref["name"]), ref, kind="ConfigMap")
    raise PodSetupError(f"env {var['name']!r}: unsupported valueFrom {sorted(value_from)}")


def _lookup(data: Mapping[str, T] | None, ref: Obj, *, kind: str) -> T | None:
    if data is not None and ref["key"] in data:
        return data[ref["key"]]
    if ref.get("optional"):
        return None
    what = "not found" if data is None else f"has no key {ref['key']!r}"
    raise PodSetupError(f"{kind} {ref['name']!r} {what} (env secretKeyRef/configMapKeyRef)")


def expand_refs(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion against the variables defined before this one."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def field_value(pod: Obj, path: str) -> str:
    """A downward-API field of the pod (metadata name/namespace/uid/labels/annotations...)."""
    meta = pod.get("metadata") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": pod["spec"].get("nodeName", "localhost"),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_REF.match(path)
    if match is None:
        raise PodSetupError(f"fieldRef {path!r} is not supported locally")
    return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
