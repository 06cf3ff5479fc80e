"""Pure builders: a resolved run (run + config + settings) in, manifest dicts out.

No I/O and no clock, so the reconciler, the tests and local execution
(`longrun run`) all render exactly the same contract and pod template. The pod
passes the Pod Security Standards "restricted" profile; credentials are wired
from Secrets by reference (env `secretKeyRef` or Secret volumes), never copied.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any

from contracts.config import InferenceConfigSpec
from contracts.contract import (
    DEFAULT_CONTRACT_PATH,
    DEFAULT_SECRETS_DIR,
    EXIT_BAD_CONTRACT,
    KRATEO_CONTRACT_PATH,
    ConfigIdentity,
    RunIdentity,
    RunnerContract,
    RunnerNetwork,
)
from contracts.model import kserve_view
from contracts.resources import API_VERSION
from contracts.run import InferenceRunSpec
from controller.core import names
from controller.core.secretrefs import secret_names
from controller.core.settings import Settings

Manifest = dict[str, Any]
RUNNER_UID = 65532
TMP_VOLUME = "tmp"
CONTRACT_VOLUME = "contract"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


@dataclass(frozen=True)
class ObjectIdentity:
    """The metadata of a run or config that rendering needs."""

    name: str
    namespace: str
    uid: str = ""
    generation: int = 0


@dataclass(frozen=True)
class Resolved:
    """A run with its config, both validated: everything the builders need."""

    run: ObjectIdentity
    spec: InferenceRunSpec
    config: ObjectIdentity
    config_spec: InferenceConfigSpec

    @property
    def child_name(self) -> str:
        """The Job (one-shot) or CronJob (scheduled) name."""
        if self.spec.is_scheduled:
            return names.cron_job_name(self.run.name)
        return names.job_name(self.run.name)


def image_of(resolved: Resolved, settings: Settings) -> str:
    """The runner image: the config's, else the controller's default."""
    return resolved.config_spec.image or settings.default_runner_image


def service_account_of(resolved: Resolved, settings: Settings) -> str | None:
    """The runner pod's ServiceAccount: the config's, else RUNNER_SERVICE_ACCOUNT."""
    return resolved.config_spec.pod.service_account_name or settings.runner_service_account


def owner_reference(run: ObjectIdentity) -> Manifest:
    """An owner reference making the run the controller of a child (deletion cascades)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceRun",
        "name": run.name,
        "uid": run.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels_of(run: ObjectIdentity) -> dict[str, str]:
    """Labels on every object and pod a run owns (the informers select on them)."""
    return {
        names.MANAGED_BY: names.MANAGER,
        names.RUN_LABEL: names.run_label_value(run.name),
    }


def child_metadata(resolved: Resolved, name: str) -> Manifest:
    """Metadata of an object owned by the run."""
    return {
        "name": name,
        "namespace": resolved.run.namespace,
        "labels": labels_of(resolved.run),
        "annotations": {names.RUN_ANNOTATION: resolved.run.name},
        "ownerReferences": [owner_reference(resolved.run)],
    }


def build_contract(resolved: Resolved, settings: Settings | None = None) -> RunnerContract:
    """The runner contract of a run: no secret values, only references.

    `settings` adds the controller's network rules (DENIED_CIDRS); without any the contract
    has no `network` block, so it reads exactly as before they existed.
    """
    cfg, spec = resolved.config_spec, resolved.spec
    denied = settings.denied_cidrs if settings is not None else ()
    model = cfg.endpoint()
    return RunnerContract(
        job_id=resolved.run.uid,
        job_name=resolved.child_name,
        run=RunIdentity(
            name=resolved.run.name,
            namespace=resolved.run.namespace,
            uid=resolved.run.uid,
            generation=resolved.run.generation,
            scheduled=spec.is_scheduled,
        ),
        config=ConfigIdentity(
            name=resolved.config.name,
            namespace=resolved.config.namespace,
            generation=resolved.config.generation,
        ),
        model=model,
        kserve=kserve_view(model),
        input=cfg.storage.input,
        output=cfg.storage.output,
        errors=cfg.storage.errors,
        parameters=dict(spec.parameters),
        runner=cfg.runner,
        timeout_seconds=spec.timeout_seconds,
        secrets_dir=DEFAULT_SECRETS_DIR,
        network=RunnerNetwork(denied_cidrs=list(denied)) if denied else None,
    )


def build_config_map(resolved: Resolved, settings: Settings | None = None) -> Manifest:
    """The ConfigMap holding the contract, owned by the run."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(resolved, names.config_map_name(resolved.run.name)),
        "data": {names.CONTRACT_KEY: build_contract(resolved, settings).to_json()},
    }


def restricted_container_security() -> Manifest:
    """Container security context of the "restricted" Pod Security Standard."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod_security() -> Manifest:
    """Pod security context of the "restricted" Pod Security Standard."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNNER_UID,
        "runAsGroup": RUNNER_UID,
        "fsGroup": RUNNER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _field_env(name: str, path: str) -> Manifest:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def runner_env(resolved: Resolved) -> list[Manifest]:
    """Environment of the runner: contract path, identity, then the config's own variables."""
    env: list[Manifest] = [
        {"name": "CONTRACT_PATH", "value": DEFAULT_CONTRACT_PATH},
        _field_env("POD_UID", "metadata.uid"),
        _field_env("pod_uid", "metadata.uid"),
        {"name": "JOB_ID", "value": resolved.run.uid},
        _field_env("JOB_NAME", f"metadata.labels['{JOB_NAME_LABEL}']"),
        {"name": "RUN_NAME", "value": resolved.run.name},
        {"name": "RUN_NAMESPACE", "value": resolved.run.namespace},
        {"name": "RUN_UID", "value": resolved.run.uid},
    ]
    for var in resolved.config_spec.pod.env:
        if var.secret_key_ref is not None:
            ref = var.secret_key_ref
            source = {"secretKeyRef": {"name": ref.name, "key": ref.key}}
            env.append({"name": var.name, "valueFrom": source})
        else:
            env.append({"name": var.name, "value": var.value})
    return env


def volumes_and_mounts(resolved: Resolved) -> tuple[list[Manifest], list[Manifest]]:
    """Pod volumes and runner mounts: contract (read-only), /tmp, claims, one per Secret."""
    config_map = names.config_map_name(resolved.run.name)
    volumes: list[Manifest] = [
        {
            "name": CONTRACT_VOLUME,
            "configMap": {
                "name": config_map,
                "items": [{"key": names.CONTRACT_KEY, "path": names.CONTRACT_KEY}],
            },
        },
        {"name": TMP_VOLUME, "emptyDir": {}},
    ]
    mounts: list[Manifest] = [
        {
            "name": CONTRACT_VOLUME,
            "mountPath": posixpath.dirname(DEFAULT_CONTRACT_PATH),
            "readOnly": True,
        },
        {"name": TMP_VOLUME, "mountPath": "/tmp"},
    ]
    if resolved.config_spec.uses_krateo_contract_path():
        mounts.append(
            {
                "name": CONTRACT_VOLUME,
                "mountPath": KRATEO_CONTRACT_PATH,
                "subPath": names.CONTRACT_KEY,
                "readOnly": True,
            }
        )
    for claim, mount_path, read_only in resolved.config_spec.storage.volume_claims():
        volume = names.claim_volume_name(claim)
        if all(v["name"] != volume for v in volumes):
            volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": volume, "mountPath": mount_path, "readOnly": read_only})
    for secret in secret_names(resolved.config_spec):
        volume = names.secret_volume_name(secret)
        volumes.append({"name": volume, "secret": {"secretName": secret, "defaultMode": 0o440}})
        mounts.append(
            {
                "name": volume,
                "mountPath": f"{DEFAULT_SECRETS_DIR}/{secret}",
                "readOnly": True,
            }
        )
    return volumes, mounts


def _resources(spec: InferenceConfigSpec) -> Manifest:
    res = spec.pod.resources
    if res is None:
        return {}
    return {k: v for k, v in (("requests", res.requests), ("limits", res.limits)) if v}


def build_container(resolved: Resolved, settings: Settings, *, mounts: list[Manifest]) -> Manifest:
    """The runner container."""
    pod = resolved.config_spec.pod
    container: Manifest = {
        "name": names.CONTAINER_NAME,
        "image": image_of(resolved, settings),
        "env": runner_env(resolved),
        "volumeMounts": mounts,
        "securityContext": restricted_container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": _resources(resolved.config_spec),
    }
    if pod.image_pull_policy is not None:
        container["imagePullPolicy"] = pod.image_pull_policy
    return container


def build_pod_template(resolved: Resolved, settings: Settings) -> Manifest:
    """The runner pod template (also what local execution runs)."""
    pod = resolved.config_spec.pod
    volumes, mounts = volumes_and_mounts(resolved)
    spec: Manifest = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": restricted_pod_security(),
        "containers": [build_container(resolved, settings, mounts=mounts)],
        "volumes": volumes,
    }
    if account := service_account_of(resolved, settings):
        spec["serviceAccountName"] = account
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.tolerations:
        spec["tolerations"] = [t.to_wire() for t in pod.tolerations]
    if pod.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in pod.image_pull_secrets]
    metadata = {
        "labels": {**pod.labels, **labels_of(resolved.run)},
        "annotations": {**pod.annotations, names.RUN_ANNOTATION: resolved.run.name},
    }
    return {"metadata": metadata, "spec": spec}


def pod_failure_policy() -> Manifest:
    """Fail the Job at once on a bad contract (exit 2); disruptions do not count."""
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": names.CONTAINER_NAME,
                    "operator": "In",
                    "values": [EXIT_BAD_CONTRACT],
                },
            },
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }


def build_job_spec(resolved: Resolved, settings: Settings) -> Manifest:
    """The Job spec of one execution (one-shot Job or a CronJob's jobTemplate)."""
    spec: Manifest = {
        "backoffLimit": resolved.config_spec.backoff_limit,
        "podFailurePolicy": pod_failure_policy(),
        "template": build_pod_template(resolved, settings),
    }
    if resolved.spec.timeout_seconds is not None:
        spec["activeDeadlineSeconds"] = resolved.spec.timeout_seconds
    return spec


def auto_delete_annotations(spec: InferenceConfigSpec) -> dict[str, str]:
    """The config's autoDeletePolicy frozen onto a one-shot Job at creation.

    A config change never touches a finished or running one-shot run, so the
    policy in force is the one the run started with.
    """
    return {
        names.POLICY_ANNOTATION: spec.auto_delete_policy,
        names.DELAY_ANNOTATION: str(spec.auto_delete_delay_seconds),
    }


def build_job(resolved: Resolved, settings: Settings) -> Manifest:
    """The Job of a one-shot run, owned by the run."""
    metadata = child_metadata(resolved, names.job_name(resolved.run.name))
    metadata["annotations"].update(auto_delete_annotations(resolved.config_spec))
    spec = build_job_spec(resolved, settings)
    spec["suspend"] = resolved.spec.suspend or resolved.spec.cancel  # created paused, or not
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def build_cron_job_spec(resolved: Resolved, settings: Settings) -> Manifest:
    """The CronJob spec of a scheduled run (every field here is ours and kept in sync)."""
    run = resolved.spec
    assert run.schedule is not None  # callers build CronJobs for scheduled runs only
    job_metadata = {
        "labels": labels_of(resolved.run),
        "annotations": {names.RUN_ANNOTATION: resolved.run.name},
    }
    spec: Manifest = {
        "schedule": run.schedule,
        "concurrencyPolicy": run.concurrency_policy,
        "suspend": run.suspend,
        "successfulJobsHistoryLimit": run.successful_jobs_history_limit,
        "failedJobsHistoryLimit": run.failed_jobs_history_limit,
        "jobTemplate": {
            "metadata": job_metadata,
            "spec": build_job_spec(resolved, settings),
        },
    }
    if run.time_zone is not None:
        spec["timeZone"] = run.time_zone
    if run.starting_deadline_seconds is not None:
        spec["startingDeadlineSeconds"] = run.starting_deadline_seconds
    return spec


def spec_hash(spec: Manifest) -> str:
    """A stable digest of a desired spec; stored as an annotation to detect drift.

    Comparing against the stored spec would always differ: the API server adds
    defaults we do not set. The annotation records what we last asked for.
    """
    return names.short_hash(json.dumps(spec, sort_keys=True, separators=(",", ":")), 16)


def build_cron_job(resolved: Resolved, settings: Settings) -> Manifest:
    """The CronJob of a scheduled run, owned by the run."""
    spec = build_cron_job_spec(resolved, settings)
    metadata = child_metadata(resolved, names.cron_job_name(resolved.run.name))
    metadata["annotations"][names.SPEC_HASH_ANNOTATION] = spec_hash(spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": spec,
    }
