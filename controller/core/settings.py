"""The controller's settings, read from the environment (and flags) once at start-up.

The Helm chart sets exactly these environment variables; flags override them for
local runs. A bad value fails at start-up with a message naming the variable,
instead of surfacing later as a confusing reconcile error.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from contracts.base import DNS_SUBDOMAIN
from contracts.contract import checked_cidr

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Started by hand (a workstation, CI), /metrics and the probes answer only on this machine.
# The chart binds them to the pod's network, where the kubelet and Prometheus reach them.
DEFAULT_BIND_ADDRESS = "127.0.0.1"
DEFAULT_IMAGE = "ghcr.io/longrun-dev/longrun-runner:latest"  # docker/runner.Dockerfile
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|s|m|h)?)+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)?")
QUEUE_NAME_MAX = 63  # it becomes the kueue.x-k8s.io/queue-name label value
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class SettingsError(ValueError):
    """A setting has a value the controller cannot use."""


def parse_duration(text: str, *, name: str = "duration") -> float:
    """Seconds in `30s`, `1m`, `1h30m`, `250ms` or a bare number of seconds (`300`)."""
    value = text.strip()
    if not value or not _DURATION.match(value):
        raise SettingsError(f"{name}={text!r} is not a duration (examples: 30s, 1m, 1h30m, 300)")
    seconds = sum(float(n) * _UNIT_SECONDS[u or None] for n, u in _PART.findall(value))
    if seconds <= 0:
        raise SettingsError(f"{name}={text!r} must be greater than zero")
    return seconds


def parse_list(text: str) -> tuple[str, ...]:
    """A comma-separated list; blanks dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_bool(text: str, *, name: str) -> bool:
    """true/false (also 1/0, yes/no)."""
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off", ""):
        return False
    raise SettingsError(f"{name}={text!r} is not true or false")


def parse_int(text: str, *, name: str, minimum: int = 1) -> int:
    """An integer not below `minimum`."""
    try:
        value = int(text.strip())
    except ValueError:
        raise SettingsError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise SettingsError(f"{name}={text!r} must be at least {minimum}")
    return value


def parse_address(text: str, *, name: str) -> str:
    """An IPv4 or IPv6 address to listen on (`0.0.0.0` and `::` mean every interface)."""
    value = text.strip() or DEFAULT_BIND_ADDRESS
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise SettingsError(
            f"{name}={text!r} is not an IP address (examples: 127.0.0.1, 0.0.0.0, ::)"
        ) from None


def parse_cidrs(text: str, *, name: str) -> tuple[str, ...]:
    """Comma-separated CIDRs, each made canonical (an address alone is a /32 or /128)."""
    cidrs = []
    for item in parse_list(text):
        try:
            cidrs.append(checked_cidr(item))
        except ValueError as exc:
            raise SettingsError(f"{name}: {exc}") from None
    return tuple(dict.fromkeys(cidrs))


def parse_queue_name(text: str) -> str | None:
    """A Kueue LocalQueue name (a label value: an object name of at most 63 characters), or
    None when blank."""
    value = text.strip()
    if not value:
        return None
    if len(value) > QUEUE_NAME_MAX or not re.fullmatch(DNS_SUBDOMAIN, value):
        raise SettingsError(
            f"DEFAULT_QUEUE_NAME={text!r} is not a LocalQueue name (lowercase letters, digits, "
            f"'-' and '.', at most {QUEUE_NAME_MAX} characters)"
        )
    return value


@dataclass(frozen=True)
class Settings:
    """Everything the controller reads from its environment."""

    polling_interval: float = 300.0
    progress_interval: float = 15.0  # the least time between two reads of a run's progress
    max_reconcile_rate: int = 1
    watch_namespaces: tuple[str, ...] = ()
    default_runner_image: str = DEFAULT_IMAGE
    allowed_images: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    allowed_pod_labels: tuple[str, ...] = ()
    allowed_pod_annotations: tuple[str, ...] = ()
    allowed_tolerations: tuple[str, ...] = ()
    allowed_priority_classes: tuple[str, ...] = ()  # runner pods' spec.priorityClassName
    # Kueue (docs/shared-clusters.md): the queue of runs that name none, whether Kueue manages
    # Jobs without a queue label (its manageJobsWithoutQueueName), the WorkloadPriorityClasses
    # runs may name.
    default_queue_name: str | None = None
    kueue_manages_jobs_without_queue_name: bool = False
    allowed_workload_priority_classes: tuple[str, ...] = ()
    # Networks runner pods never connect to, enforced by the runner after DNS resolution.
    denied_cidrs: tuple[str, ...] = ()
    runner_service_account: str | None = None
    leader_election: bool = True
    leader_election_namespace: str = "default"
    lease_name: str = "longrun-controller"
    log_level: str = "INFO"
    log_format: str = "json"
    metrics_port: int = 8080
    health_port: int = 8081
    metrics_bind_address: str = DEFAULT_BIND_ADDRESS
    health_bind_address: str = DEFAULT_BIND_ADDRESS
    lease_duration: int = 15
    renew_deadline: int = 10
    retry_period: int = 2


def default_namespace(env: Mapping[str, str], *, sa_file: str = SA_NAMESPACE_FILE) -> str:
    """The pod's namespace: POD_NAMESPACE, else the serviceaccount file, else `default`."""
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    try:
        with open(sa_file, encoding="utf-8") as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from environment variables; raises SettingsError naming the bad one."""
    env = os.environ if env is None else env
    get = env.get
    level = get("LOG_LEVEL", "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise SettingsError(f"LOG_LEVEL={level!r} is not DEBUG, INFO, WARNING or ERROR")
    log_format = get("LOG_FORMAT", "json").lower()
    if log_format not in ("json", "text"):
        raise SettingsError(f"LOG_FORMAT={log_format!r} is not json or text")
    return Settings(
        polling_interval=parse_duration(get("POLLING_INTERVAL", "5m"), name="POLLING_INTERVAL"),
        progress_interval=parse_duration(get("PROGRESS_INTERVAL", "15s"), name="PROGRESS_INTERVAL"),
        max_reconcile_rate=parse_int(get("MAX_RECONCILE_RATE", "1"), name="MAX_RECONCILE_RATE"),
        watch_namespaces=parse_list(get("WATCH_NAMESPACES", "")),
        default_runner_image=get("DEFAULT_RUNNER_IMAGE", "") or DEFAULT_IMAGE,
        allowed_images=parse_list(get("ALLOWED_IMAGES", "")),
        allowed_service_accounts=parse_list(get("ALLOWED_SERVICE_ACCOUNTS", "")),
        allowed_pod_labels=parse_list(get("ALLOWED_POD_LABELS", "")),
        allowed_pod_annotations=parse_list(get("ALLOWED_POD_ANNOTATIONS", "")),
        allowed_tolerations=parse_list(get("ALLOWED_TOLERATIONS", "")),
        allowed_priority_classes=parse_list(get("ALLOWED_PRIORITY_CLASSES", "")),
        default_queue_name=parse_queue_name(get("DEFAULT_QUEUE_NAME", "")),
        kueue_manages_jobs_without_queue_name=parse_bool(
            get("KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME", "false"),
            name="KUEUE_MANAGE_JOBS_WITHOUT_QUEUE_NAME",
        ),
        allowed_workload_priority_classes=parse_list(get("ALLOWED_WORKLOAD_PRIORITY_CLASSES", "")),
        denied_cidrs=parse_cidrs(get("DENIED_CIDRS", ""), name="DENIED_CIDRS"),
        runner_service_account=get("RUNNER_SERVICE_ACCOUNT") or None,
        leader_election=parse_bool(get("LEADER_ELECTION", "true"), name="LEADER_ELECTION"),
        leader_election_namespace=get("LEADER_ELECTION_NAMESPACE") or default_namespace(env),
        lease_name=get("LEASE_NAME", "") or "longrun-controller",
        log_level=level,
        log_format=log_format,
        metrics_port=parse_int(get("METRICS_PORT", "8080"), name="METRICS_PORT", minimum=0),
        health_port=parse_int(get("HEALTH_PORT", "8081"), name="HEALTH_PORT", minimum=0),
        metrics_bind_address=parse_address(
            get("METRICS_BIND_ADDRESS", ""), name="METRICS_BIND_ADDRESS"
        ),
        health_bind_address=parse_address(
            get("HEALTH_BIND_ADDRESS", ""), name="HEALTH_BIND_ADDRESS"
        ),
    )
