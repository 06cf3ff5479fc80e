"""Per-kind defaulting and validation for the built-in resources.

Only what a controller can observe is reproduced: the defaults the real server
fills in (so a controller comparing desired and actual sees the same drift it
will see on a cluster), the Job selector/label generation, immutable fields, and
the validation errors a controller can realistically trigger.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import zoneinfo
from typing import Any

from croniter import croniter

from . import crd, events, qos
from .errors import FieldError, forbidden, invalid, not_supported, required
from .jobspec import validate_counts, validate_job_update
from .registry import ResourceType

Obj = dict[str, Any]

_DNS1123_SUB = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_QUALIFIED = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
SUB_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_DNS1123_SUB}')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_DNS1123_LABEL}')"
)


def validate_name(rt: ResourceType, name: str) -> list[FieldError]:
    """metadata.name rules: DNS label for namespaces, DNS subdomain otherwise."""
    path = "metadata.name"
    if rt.plural == "namespaces":
        if len(name) > 63 or not _DNS1123_LABEL_RE.fullmatch(name):
            return [invalid(path, name, LABEL_MSG)]
        return []
    if rt.group == "rbac.authorization.k8s.io":  # path segment names: system:discovery
        bad = name in (".", "..") or "/" in name or "%" in name
        return [invalid(path, name, "may not contain '/' or '%'")] if bad else []
    if len(name) > 253 or not _DNS1123_SUB_RE.fullmatch(name):
        return [invalid(path, name, SUB_MSG)]
    limit = {"jobs": 63, "cronjobs": 52}.get(rt.plural)
    if limit and len(name) > limit:
        return [invalid(path, name, f"must be no more than {limit} characters")]
    return []


def validate_metadata(meta: Obj) -> list[FieldError]:
    errors: list[FieldError] = []
    for key, value in (meta.get("labels") or {}).items():
        errors += _qualified_name("metadata.labels", key)
        if not isinstance(value, str) or not _valid_label_value(value):
            errors.append(
                invalid(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character",
                )
            )
    for key in meta.get("annotations") or {}:
        errors += _qualified_name("metadata.annotations", key)
    return errors


# Every write validates its labels and annotations; the same few keys and values recur,
# so their verdicts are cached (pure functions of the string).
_DNS1123_SUB_RE = re.compile(_DNS1123_SUB)
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_LABEL_VALUE_RE = re.compile(_LABEL_VALUE)
_QUALIFIED_RE = re.compile(_QUALIFIED)


@functools.lru_cache(maxsize=4096)
def _valid_label_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE_RE.fullmatch(value) is not None


@functools.lru_cache(maxsize=4096)
def _valid_qualified_name(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    ok = _QUALIFIED_RE.fullmatch(name) is not None and len(name) <= 63
    if prefix:
        ok = ok and _DNS1123_SUB_RE.fullmatch(prefix) is not None and len(prefix) <= 253
    return ok


def _qualified_name(path: str, key: str) -> list[FieldError]:
    if _valid_qualified_name(key):
        return []
    return [
        invalid(
            path,
            key,
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character",
        )
    ]


# -- defaulting ---------------------------------------------------------------------
def default_pod_spec(spec: Obj, *, restart_policy: str = "Always") -> None:
    """The defaults kube-apiserver adds to every PodSpec."""
    spec.setdefault("restartPolicy", restart_policy)
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            _default_container(c)


def default_pod(pod: Obj) -> None:
    """Pod defaults, then requests from limits (pods only, not templates) and the QoS class."""
    spec = pod.setdefault("spec", {})
    default_pod_spec(spec)
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = c.setdefault("resources", {})
        if resources.get("limits"):
            resources["requests"] = {**resources["limits"], **(resources.get("requests") or {})}
    pod.setdefault("status", {})["qosClass"] = qos.pod_qos(spec)


def _default_container(c: Obj) -> None:
    image = str(c.get("image", ""))
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    pull = "Always" if tag in ("", "latest") and "@" not in image else "IfNotPresent"
    c.setdefault("imagePullPolicy", pull)
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


def default_job_spec(spec: Obj) -> None:
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    per_index = spec.get("backoffLimitPerIndex") is not None  # 0 too
    spec.setdefault("backoffLimit", 2147483647 if per_index else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("manualSelector") is None:
        spec["manualSelector"] = False  # kube-apiserver 1.36 writes it out
    spec.setdefault(
        "podReplacementPolicy",
        "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed",
    )
    template = spec.setdefault("template", {})
    # A template without restartPolicy gets "Always" and then fails validation, as for real.
    default_pod_spec(template.setdefault("spec", {}))
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        for cond in rule.get("onPodConditions") or []:
            cond.setdefault("status", "True")


def default_job(job: Obj) -> None:
    """Job strategy PrepareForCreate: generated selector and controller-uid labels."""
    spec = job.setdefault("spec", {})
    default_job_spec(spec)
    if spec.get("manualSelector"):
        return
    uid = job["metadata"]["uid"]
    name = job["metadata"]["name"]
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    # A Job without labels takes its template's (generated ones included), as on a cluster.
    if not job["metadata"].get("labels"):
        job["metadata"]["labels"] = dict(labels)


def default_cronjob(cj: Obj) -> None:
    spec = cj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    # SetDefaults_Job is for Jobs: a jobTemplate gets only its pod template's defaults (and
    # the empty metadata a Go struct always has); the Job made from it gets the rest.
    job_template = spec.setdefault("jobTemplate", {})
    job_template.setdefault("metadata", {})
    template = job_template.setdefault("spec", {}).setdefault("template", {})
    template.setdefault("metadata", {})
    default_pod_spec(template.setdefault("spec", {}))


def default_secret(secret: Obj) -> None:
    secret.setdefault("type", "Opaque")
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = dict(secret.get("data") or {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data


def default_namespace(ns: Obj) -> None:
    name = ns["metadata"]["name"]
    ns["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns.setdefault("status", {}).setdefault("phase", "Active")


DEFAULTERS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): crd.default_crd,
    ("", "pods"): default_pod,
    ("batch", "jobs"): default_job,
    ("batch", "cronjobs"): default_cronjob,
    ("", "secrets"): default_secret,
    ("", "namespaces"): default_namespace,
}


# -- validation ---------------------------------------------------------------------
def validate_pod_spec(spec: Obj, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(required(f"{path}.containers"))
    names: set[str] = set()
    for i, c in enumerate(containers):
        cpath = f"{path}.containers[{i}]"
        if not c.get("name"):
            errors.append(required(f"{cpath}.name"))
        elif c["name"] in names:
            errors.append(
                FieldError(
                    "FieldValueDuplicate", f"{cpath}.name", f'Duplicate value: "{c["name"]}"'
                )
            )
        names.add(c.get("name", ""))
        if not c.get("image"):
            errors.append(required(f"{cpath}.image"))
    policy = spec.get("restartPolicy")
    if policy not in ("Always", "OnFailure", "Never"):
        errors.append(
            not_supported(f"{path}.restartPolicy", policy, ["Always", "OnFailure", "Never"])
        )
    return errors


def validate_job_spec(spec: Obj, path: str, *, template: bool = False) -> list[FieldError]:
    """A Job's spec; a CronJob's job `template` is not defaulted, so may omit completionMode."""
    tpath = f"{path}.template.spec"
    errors = validate_pod_spec(spec.get("template", {}).get("spec", {}), tpath)
    policy = spec.get("template", {}).get("spec", {}).get("restartPolicy")
    if policy not in ("Never", "OnFailure"):
        errors.append(not_supported(f"{tpath}.restartPolicy", policy, ["OnFailure", "Never"]))
    if spec.get("podFailurePolicy") and policy != "Never":
        errors.append(
            invalid(
                f"{tpath}.restartPolicy",
                policy,
                'only "Never" is supported when podFailurePolicy is specified',
            )
        )
    return validate_counts(spec, path, template=template) + errors


def validate_cronjob(cj: Obj) -> list[FieldError]:
    spec = cj.get("spec", {})
    job_spec = spec.get("jobTemplate", {}).get("spec", {})
    errors = validate_job_spec(job_spec, "spec.jobTemplate.spec", template=True)
    schedule = spec.get("schedule")
    if not schedule:
        errors.append(required("spec.schedule"))
    elif "TZ" in schedule:
        errors.append(
            invalid(
                "spec.schedule",
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            )
        )
    elif not croniter.is_valid(schedule):
        errors.append(invalid("spec.schedule", schedule, "unparseable schedule"))
    tz = spec.get("timeZone")
    if tz is not None:
        try:
            zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            errors.append(invalid("spec.timeZone", tz, "unknown time zone " + tz))
    cp = spec.get("concurrencyPolicy")
    if cp not in ("Allow", "Forbid", "Replace"):
        errors.append(not_supported("spec.concurrencyPolicy", cp, ["Allow", "Forbid", "Replace"]))
    return errors


def validate_secret(secret: Obj) -> list[FieldError]:
    errors = []
    for key, value in (secret.get("data") or {}).items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            errors.append(
                invalid(f"data[{key}]", "<secret contents redacted>", "illegal base64 data")
            )
    return errors


VALIDATORS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): crd.validate_crd,
    ("", "pods"): lambda o: validate_pod_spec(o.get("spec", {}), "spec"),
    ("batch", "jobs"): lambda o: validate_job_spec(o.get("spec", {}), "spec"),
    ("batch", "cronjobs"): validate_cronjob,
    ("", "secrets"): validate_secret,
    ("", "events"): events.validate_core_v1,
    ("events.k8s.io", "events"): events.validate_events_v1,
}


def validate_update(rt: ResourceType, new: Obj, old: Obj) -> list[FieldError]:
    """Immutable-field rules enforced on update."""
    if (rt.group, rt.plural) == ("batch", "jobs"):
        return validate_job_update(new, old)
    if (rt.group, rt.plural) == ("", "pods"):
        return _pod_update(new.get("spec", {}), old.get("spec", {}))
    immutable = rt.plural in ("configmaps", "secrets") and old.get("immutable")
    if immutable and any(new.get(k) != old.get(k) for k in ("data", "binaryData", "immutable")):
        return [forbidden("data", "field is immutable when `immutable` is set")]
    return []


def _pod_update(new: Obj, old: Obj) -> list[FieldError]:
    def mutable_stripped(spec: Obj) -> Obj:
        out = {k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations")}
        for field in ("containers", "initContainers"):
            out[field] = [
                {k: v for k, v in c.items() if k != "image"} for c in spec.get(field) or []
            ]
        return out

    if mutable_stripped(new) != mutable_stripped(old):
        return [
            forbidden(
                "spec",
                "pod updates may not change fields other than "
                "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                "existing tolerations)",
            )
        ]
    return []
