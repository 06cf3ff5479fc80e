"""What a config may put into the runner pod: creating a config must not be creating a Pod.

A config author chooses the model, the data and a few pod knobs, and the runner
pod then runs with the run namespace's Secrets. So the knobs that would let the
author run other code, or reach more than the runner needs, are refused:
- environment variables the runtime or longrun itself interprets (`LD_*`,
  `PYTHON*`, `BROWSER`, `PATH`, `GLIBC_TUNABLES`, the contract and identity
  variables the pod builder sets, ...): each can execute code inside an allowed image
  or point the runner at another contract;
- pod label and annotation keys outside the controller's allow-lists (a label can
  join another Service's or NetworkPolicy's selector; an annotation can turn AppArmor
  off); keys of Kubernetes' own and of longrun's prefixes are never allowed;
- tolerations whose taint key is outside the allow-list (`operator: Exists` with no key
  tolerates every taint: allowed only by the `*` entry);
- a volume `mountPath` that covers the runner's code, its contract, its Secrets or
  the system directories.

Each refusal names the field and the controller setting (and chart value) that
allows it, so a platform team can open exactly what it means to.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass

from contracts.config import InferenceConfigSpec
from contracts.contract import DEFAULT_CONTRACT_PATH, DEFAULT_SECRETS_DIR, KRATEO_CONTRACT_PATH
from contracts.storage import FileStorage
from controller.core.settings import Settings
from controller.core.validation import Problem

RESERVED_ENV_PREFIXES = ("LD_", "PYTHON", "LONGRUN_", "DYLD_")
RESERVED_ENV = frozenset(
    {
        # interpreted by the dynamic loader, the C library, Python or a shell
        "BROWSER", "GLIBC_TUNABLES", "PATH", "BASH_ENV", "ENV", "SHELLOPTS", "PS4",
        "MALLOC_CHECK_", "OPENSSL_CONF", "OPENSSL_MODULES", "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        # set by the pod builder or read by the runner (controller/core/builders.py)
        "CONTRACT_PATH", "POD_UID", "pod_uid", "JOB_ID", "JOB_NAME", "RUN_NAME",
        "RUN_NAMESPACE", "RUN_UID", "TERMINATION_MESSAGE_PATH", "KUBECONFIG",
    }
)  # fmt: skip
# Label and annotation keys no config may set: Kubernetes' own (AppArmor, seccomp, the
# Job controller's labels...) and longrun's (the controller selects its children by them).
RESERVED_KEY_DOMAINS = ("kubernetes.io", "k8s.io", "longrun.dev")
RESERVED_KEYS = frozenset({"job-name", "controller-uid"})
# Paths a volume may neither cover nor sit inside of (code, contract, Secrets, system).
PROTECTED_PATHS = (
    "/opt/longrun", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/sys",
    "/dev", "/var/run/longrun", "/run", "/root", "/home",
    posixpath.dirname(DEFAULT_CONTRACT_PATH), DEFAULT_SECRETS_DIR,
)  # fmt: skip
# Paths a volume may sit inside of but not cover (the writable /tmp holds Krateo's contract).
COVER_ONLY = ("/tmp", KRATEO_CONTRACT_PATH, "/var", "/var/run")


@dataclass(frozen=True)
class PodPolicy:
    """The controller's allow-lists for what a config may add to the runner pod (globs)."""

    label_keys: tuple[str, ...] = ()
    annotation_keys: tuple[str, ...] = ()
    toleration_keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> PodPolicy:
        """The policy the controller's settings set."""
        return cls(
            label_keys=settings.allowed_pod_labels,
            annotation_keys=settings.allowed_pod_annotations,
            toleration_keys=settings.allowed_tolerations,
        )


def pod_problems(spec: InferenceConfigSpec, policy: PodPolicy) -> list[Problem]:
    """Every knob of `spec` that would give the config author more than a runner needs."""
    return [
        *env_problems(spec),
        *key_problems(spec.pod.labels, field="spec.pod.labels", allowed=policy.label_keys,
                      setting="ALLOWED_POD_LABELS (chart: runner.allowedPodLabels)"),
        *key_problems(spec.pod.annotations, field="spec.pod.annotations",
                      allowed=policy.annotation_keys,
                      setting="ALLOWED_POD_ANNOTATIONS (chart: runner.allowedPodAnnotations)"),
        *toleration_problems(spec, policy.toleration_keys),
        *mount_problems(spec),
    ]  # fmt: skip


_RESERVED_ENV_UPPER = frozenset(name.upper() for name in RESERVED_ENV)


def is_reserved_env(name: str) -> bool:
    """True for a variable the runtime or longrun interprets, compared without regard to case:
    some readers ignore it (pydantic-settings, so MLServer), and no legitimate use needs a
    reserved name in another case."""
    upper = name.upper()
    return upper in _RESERVED_ENV_UPPER or upper.startswith(RESERVED_ENV_PREFIXES)


def env_problems(spec: InferenceConfigSpec) -> Iterator[Problem]:
    """Refused environment variable names."""
    for index, var in enumerate(spec.pod.env):
        if is_reserved_env(var.name):
            yield Problem(
                f"spec.pod.env[{index}].name",
                "EnvNotAllowed",
                f'environment variable "{var.name}" is interpreted by the runtime or by longrun '
                "(LD_*, PYTHON*, LONGRUN_*, BROWSER, PATH and the variables the runner reads): a "
                "config may not set it; pass settings through the config's own fields",
            )


def _is_reserved_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if not prefix:
        return name in RESERVED_KEYS
    return any(prefix == d or prefix.endswith("." + d) for d in RESERVED_KEY_DOMAINS)


def key_problems(
    keys: dict[str, str], *, field: str, allowed: tuple[str, ...], setting: str
) -> Iterator[Problem]:
    """Label or annotation keys that are reserved or not on the allow-list."""
    what = "label" if field.endswith("labels") else "annotation"
    for key in keys:
        if _is_reserved_key(key):
            reason = f"{what} keys of kubernetes.io, k8s.io and longrun.dev are reserved"
        elif not any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed):
            listed = ", ".join(allowed) if allowed else "empty"
            reason = f"the controller allows {what} keys matching {setting}, which is {listed}"
        else:
            continue
        yield Problem(f"{field}.{key}", f"Pod{what.title()}NotAllowed",
                      f'{what} "{key}" is not allowed: {reason}')  # fmt: skip


def toleration_problems(spec: InferenceConfigSpec, allowed: tuple[str, ...]) -> Iterator[Problem]:
    """Tolerations whose taint key is not on the allow-list."""
    setting = "ALLOWED_TOLERATIONS (chart: runner.allowedTolerations)"
    for index, toleration in enumerate(spec.pod.tolerations):
        key = toleration.key or ""
        if key == "" and "*" in allowed:
            continue
        if key and any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed):
            continue
        what = f'taint key "{key}"' if key else "every taint (no key)"
        listed = ", ".join(allowed) if allowed else "empty"
        yield Problem(
            f"spec.pod.tolerations[{index}]",
            "TolerationNotAllowed",
            f"tolerating {what} is not allowed: the controller allows taint keys matching "
            f"{setting}, which is {listed}",
        )


def mount_problems(spec: InferenceConfigSpec) -> Iterator[Problem]:
    """File-storage volumes mounted over the runner's code, contract, Secrets or system."""
    for role in ("input", "output", "errors"):
        storage = getattr(spec.storage, role, None)
        settings = storage.body() if storage is not None else None
        if not isinstance(settings, FileStorage):
            continue
        mount = settings.volume_mount_path()
        if mount is not None and (clash := _clash(posixpath.normpath(mount))):
            yield Problem(
                f"spec.storage.{role}.file.mountPath",
                "MountPathNotAllowed",
                f'volume mount path "{mount}" would cover {clash}: mount the volume elsewhere, '
                "e.g. under /data",
            )


def _clash(mount: str) -> str | None:
    if mount == "/":
        return "the whole filesystem"
    for path in PROTECTED_PATHS:
        if mount == path or mount.startswith(path + "/") or path.startswith(mount + "/"):
            return f"{path} (the runner's code, contract, Secrets or system files)"
    for path in COVER_ONLY:
        if mount == path or path.startswith(mount + "/"):
            return f"{path} (the runner's scratch space and Krateo's contract path)"
    return None
