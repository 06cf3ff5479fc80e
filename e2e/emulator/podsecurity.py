"""PodSecurity admission: the Pod Security Standards of a namespace's labels.

kube-apiserver's PodSecurity plugin reads `pod-security.kubernetes.io/enforce` (and
`warn`) from the pod's namespace. A pod that violates the enforced level is refused with
403 and every failed check in one message; a workload (Job, CronJob, Deployment) is never
refused, but its pod template is checked against the warn level (the enforce level when
no warn label is set) and the violations come back as a Warning header. Pods created by
the Job controller go through the same admission, so a violating Job gets a
`FailedCreate` Event and no pod.

The checks are those of pod-security-admission's `policy/check_*.go` that a pod spec can
fail, with their reasons and details worded as the real ones and ordered by check id:
baseline (privileged, host namespaces, hostPorts, hostPath volumes, non-default
capabilities) and restricted (allowPrivilegeEscalation, capabilities drop ALL, volume
types, runAsNonRoot, runAsUser=0, seccompProfile). Not checked: AppArmor, SELinux,
procMount, sysctls, Windows host process (see "Known divergences" in e2e/README.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .errors import ApiError

Obj = dict[str, Any]
PREFIX = "pod-security.kubernetes.io/"
LEVELS = ("privileged", "baseline", "restricted")
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                      "persistentVolumeClaim", "projected", "secret"}  # fmt: skip
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}  # fmt: skip
Check = Callable[[Obj, list[Obj]], str | None]


def _q(names: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in names)


def _containers_phrase(names: list[str]) -> str:
    return f"{'container' if len(names) == 1 else 'containers'} {_q(names)}"


def _must_not_add(names: list[str], capabilities: set[str]) -> str:
    where = "in securityContext.capabilities.add"
    return f"{_containers_phrase(names)} must not include {_q(sorted(capabilities))} {where}"


def _sc(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _all_containers(spec: Obj) -> list[Obj]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


# -- the checks: each returns "reason (detail)" or None ----------------------------------
def allow_privilege_escalation(spec: Obj, cs: list[Obj]) -> str | None:
    bad = [c["name"] for c in cs if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    detail = f"{_containers_phrase(bad)} must set securityContext.allowPrivilegeEscalation=false"
    return f"allowPrivilegeEscalation != false ({detail})"


def capabilities_restricted(spec: Obj, cs: list[Obj]) -> str | None:
    missing_drop, adding, forbidden = [], [], set()
    for c in cs:
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            missing_drop.append(c["name"])
        extra = {a for a in caps.get("add") or [] if a != "NET_BIND_SERVICE"}
        if extra:
            adding.append(c["name"])
            forbidden |= extra
    details = []
    if missing_drop:
        details.append(
            f'{_containers_phrase(missing_drop)} must set securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(_must_not_add(adding, forbidden))
    return f"unrestricted capabilities ({'; '.join(details)})" if details else None  # fmt: skip


def capabilities_baseline(spec: Obj, cs: list[Obj]) -> str | None:
    adding, forbidden = [], set()
    for c in cs:
        extra = set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            adding.append(c["name"])
            forbidden |= extra
    if not adding:
        return None
    return f"non-default capabilities ({_must_not_add(adding, forbidden)})"


def host_namespaces(spec: Obj, cs: list[Obj]) -> str | None:
    used = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return f"host namespaces ({', '.join(used)})" if used else None


def host_ports(spec: Obj, cs: list[Obj]) -> str | None:
    names, ports = [], []
    for c in cs:
        mine = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if mine:
            names.append(c["name"])
            ports += mine
    if not names:
        return None
    verb = "uses" if len(names) == 1 else "use"
    noun = "hostPort" if len(ports) == 1 else "hostPorts"
    return f"hostPort ({_containers_phrase(names)} {verb} {noun} {', '.join(ports)})"


def host_path_volumes(spec: Obj, cs: list[Obj]) -> str | None:
    names = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if not names:
        return None
    what = f"{'volume' if len(names) == 1 else 'volumes'} {_q(names)}"
    return f"hostPath volumes ({what})"


def privileged(spec: Obj, cs: list[Obj]) -> str | None:
    bad = [c["name"] for c in cs if _sc(c).get("privileged")]
    if not bad:
        return None
    return f"privileged ({_containers_phrase(bad)} must not set securityContext.privileged=true)"


def restricted_volumes(spec: Obj, cs: list[Obj]) -> str | None:
    names, types = [], []
    for vol in spec.get("volumes") or []:
        kinds = [k for k in vol if k != "name" and k not in RESTRICTED_VOLUMES]
        if kinds:
            names.append(vol["name"])
            types += [k for k in kinds if k not in types]
    types.sort()
    if not names:
        return None
    one = len(names) == 1
    detail = (
        f"{'volume' if one else 'volumes'} {_q(names)} {'uses' if one else 'use'} restricted "
        f"{'volume type' if len(types) == 1 else 'volume types'} {_q(types)}"
    )
    return f"restricted volume types ({detail})"


def run_as_non_root(spec: Obj, cs: list[Obj]) -> str | None:
    pod = _sc(spec).get("runAsNonRoot")
    explicit = [c["name"] for c in cs if _sc(c).get("runAsNonRoot") is False]
    # Containers that set nothing inherit the pod's value: only an unset pod makes them fail.
    implicit = (
        [] if pod is not None else [c["name"] for c in cs if _sc(c).get("runAsNonRoot") is None]
    )
    setters = (["pod"] if pod is False else []) + (
        [_containers_phrase(explicit)] if explicit else []
    )
    details = []
    if setters:
        details.append(f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false")
    if implicit:
        details.append(
            f"pod or {_containers_phrase(implicit)} must set securityContext.runAsNonRoot=true"
        )
    return f"runAsNonRoot != true ({'; '.join(details)})" if details else None  # fmt: skip


def run_as_user(spec: Obj, cs: list[Obj]) -> str | None:
    setters = ["pod"] if _sc(spec).get("runAsUser") == 0 else []
    bad = [c["name"] for c in cs if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_containers_phrase(bad))
    return f"runAsUser=0 ({' and '.join(setters)} must not set runAsUser=0)" if setters else None


def seccomp_restricted(spec: Obj, cs: list[Obj]) -> str | None:
    ok = ("RuntimeDefault", "Localhost")
    pod = (_sc(spec).get("seccompProfile") or {}).get("type")
    setters, values = (["pod"], [pod]) if pod is not None and pod not in ok else ([], [])
    explicit, implicit = [], []
    for c in cs:
        kind = (_sc(c).get("seccompProfile") or {}).get("type")
        if kind is not None and kind not in ok:
            explicit.append(c["name"])
            values += [kind] if kind not in values else []
        elif kind is None and pod is None:  # inheriting a bad pod value is the pod's fault
            implicit.append(c["name"])
    if explicit:
        setters.append(_containers_phrase(explicit))
    details = []
    if setters:
        who, what = " and ".join(setters), _q(sorted(values))
        details.append(f"{who} must not set securityContext.seccompProfile.type to {what}")
    if implicit:
        what = 'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        details.append(f"pod or {_containers_phrase(implicit)} must set {what}")
    return f"seccompProfile ({'; '.join(details)})" if details else None  # fmt: skip


# Ordered as the real evaluator reports them: the baseline checks by id, then the restricted
# ones by id (restricted replaces baseline's capabilities and hostPath volume checks).
BASELINE: tuple[Check, ...] = (
    capabilities_baseline, host_namespaces, host_path_volumes, host_ports, privileged,
)  # fmt: skip
RESTRICTED: tuple[Check, ...] = (
    host_namespaces, host_ports, privileged, allow_privilege_escalation, capabilities_restricted,
    restricted_volumes, run_as_non_root, run_as_user, seccomp_restricted,
)  # fmt: skip


def violations(spec: Obj, level: str) -> list[str]:
    """Every failed check of `level` for a pod spec, worded as the real ones."""
    checks = {"baseline": BASELINE, "restricted": RESTRICTED}.get(level, ())
    containers = _all_containers(spec)
    return [v for v in (check(spec, containers) for check in checks) if v]


def _policy(namespace: Obj | None, mode: str) -> tuple[str, str]:
    """(level, version) a namespace's labels set for enforce or warn (warn defaults to enforce)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(PREFIX + mode)
    version = labels.get(f"{PREFIX}{mode}-version")
    if level is None and mode == "warn":
        level, version = labels.get(PREFIX + "enforce"), labels.get(PREFIX + "enforce-version")
    return (level if level in LEVELS else "privileged"), version or "latest"


def _templates(plural: str, obj: Obj) -> Iterator[Obj]:
    spec = obj.get("spec") or {}
    if plural == "cronjobs":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = (spec.get("template") or {}).get("spec")
    if isinstance(template, dict):
        yield template


def admit(group: str, plural: str, obj: Obj, namespace: Obj | None, warnings: list[str]) -> None:
    """Refuse a violating pod (403), warn about a violating workload template."""
    if (group, plural) == ("", "pods"):
        level, version = _policy(namespace, "enforce")
        found = violations(obj.get("spec") or {}, level)
        if found:
            meta = obj["metadata"]
            name = meta.get("name") or meta.get("generateName", "")
            message = f'violates PodSecurity "{level}:{version}": {", ".join(found)}'
            raise ApiError(403, f'pods "{name}" is forbidden: {message}',
                           details={"name": name, "group": "", "kind": "pods"})  # fmt: skip
        specs: list[Obj] = [obj.get("spec") or {}]
    elif (group, plural) in (("batch", "jobs"), ("batch", "cronjobs"), ("apps", "deployments")):
        specs = list(_templates(plural, obj))
    else:
        return
    level, version = _policy(namespace, "warn")
    for spec in specs:
        found = violations(spec, level)
        if found:
            warnings.append(f'would violate PodSecurity "{level}:{version}": {", ".join(found)}')
