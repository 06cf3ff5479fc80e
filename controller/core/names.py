"""Deterministic names and labels of the objects a run owns: "the name is the lock".

A crash between two writes must never lead to a second Job: the next reconcile
computes the same name and finds the object already there (Kubernetes' CronJob
controller names Jobs the same way). Long names are truncated and suffixed with
a short hash of the full name so that two long run names never collide.
"""

from __future__ import annotations

import hashlib

GROUP_DOMAIN = "longrun.dev"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "longrun"
RUN_LABEL = f"{GROUP_DOMAIN}/run"
RUN_ANNOTATION = f"{GROUP_DOMAIN}/run"
SPEC_HASH_ANNOTATION = f"{GROUP_DOMAIN}/spec-hash"
POLICY_ANNOTATION = f"{GROUP_DOMAIN}/auto-delete-policy"
DELAY_ANNOTATION = f"{GROUP_DOMAIN}/auto-delete-delay-seconds"
CONTAINER_NAME = "runner"
CONTRACT_KEY = "contract.json"
JOB_NAME_MAX = 63  # the Job name becomes the pods' job-name label value
CRONJOB_NAME_MAX = 52  # the CronJob controller appends -<11 chars> to make Job names
LABEL_VALUE_MAX = 63
OBJECT_NAME_MAX = 253
MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGER}"


def short_hash(text: str, length: int = 8) -> str:
    """A stable hex digest prefix of `text`."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fit(name: str, limit: int) -> str:
    """`name` if it fits in `limit` characters, else truncated + `-` + hash of the full name."""
    if len(name) <= limit:
        return name
    digest = short_hash(name)
    head = name[: limit - len(digest) - 1].rstrip("-.")
    return f"{head}-{digest}"


def job_name(run_name: str) -> str:
    """The Job of a one-shot run."""
    return fit(run_name, JOB_NAME_MAX)


def cron_job_name(run_name: str) -> str:
    """The CronJob of a scheduled run (at most 52 characters)."""
    return fit(run_name, CRONJOB_NAME_MAX)


def config_map_name(run_name: str) -> str:
    """The ConfigMap holding a run's contract."""
    return fit(f"{run_name}-contract", OBJECT_NAME_MAX)


def run_label_value(run_name: str) -> str:
    """The `longrun.dev/run` label value (label values are at most 63 characters)."""
    return fit(run_name, LABEL_VALUE_MAX)


def _volume_name(prefix: str, object_name: str) -> str:
    # Object names may hold dots, volume names may not: `a.b` and `a-b` would both become
    # `a-b`, so a name that had dots keeps them apart with a hash of the original.
    name = f"{prefix}-{object_name}"
    if "." in object_name:
        name = f"{name.replace('.', '-')}-{short_hash(object_name)}"
    return fit(name, LABEL_VALUE_MAX)


def secret_volume_name(secret_name: str) -> str:
    """A pod volume name (a DNS label) for a mounted Secret."""
    return _volume_name("secret", secret_name)


def claim_volume_name(claim: str) -> str:
    """A pod volume name (a DNS label) for a mounted PersistentVolumeClaim."""
    return _volume_name("data", claim)


def run_key(namespace: str, name: str) -> str:
    """The work-queue key of a run."""
    return f"{namespace}/{name}"


def split_key(key: str) -> tuple[str, str]:
    """(namespace, name) of a work-queue key."""
    namespace, _, name = key.partition("/")
    return namespace, name
