"""The runner pod template: what runs a run, in the cluster and under `longrun run`.

Kept apart from the contract and the Job around it (controller/core/builders.py) because
the pod is the part local execution reads (local/podspec.py) and the part Pod Security
judges. The pod passes the Pod Security Standards "restricted" profile; credentials are
wired from Secrets by reference (env `secretKeyRef` or Secret volumes), never copied.

The runner container declares one port, `metrics` (METRICS_PORT), and is told it in the
env (METRICS_PORT_ENV): Prometheus scrapes the runner's metrics there (docs/contract.md).
The env, not the contract, carries it: the port is a fact of the pod (a containerPort the
PodMonitor names), not of the run, and the contract stays the same whatever pod runs it.

A config whose `model.auth.serviceAccountToken` is set (itself, or resolved from a
deploymentRef) gets the pod's own ServiceAccount token in a projected volume, mounted
read-only in the runner container only, and its path in the env (MODEL_TOKEN_PATH_ENV).
`automountServiceAccountToken` stays false: that token is for the API server (audience the
cluster's), the projected one for the model server (its own audience), rotated by the kubelet.
"""

from __future__ import annotations

import posixpath

from contracts.auth import (
    MODEL_TOKEN_DIR,
    MODEL_TOKEN_FILE,
    MODEL_TOKEN_PATH,
    MODEL_TOKEN_PATH_ENV,
    ServiceAccountToken,
)
from contracts.config import InferenceConfigSpec
from contracts.contract import DEFAULT_CONTRACT_PATH, DEFAULT_SECRETS_DIR, KRATEO_CONTRACT_PATH
from controller.core import names
from controller.core.children import (
    Manifest,
    Resolved,
    image_of,
    labels_of,
    service_account_of,
)
from controller.core.secretrefs import secret_names
from controller.core.settings import Settings

RUNNER_UID = 65532
TMP_VOLUME = "tmp"
CONTRACT_VOLUME = "contract"
MODEL_TOKEN_VOLUME = "model-token"  # not a `secret-` or `data-` name (controller/core/names.py)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
METRICS_PORT_NAME = "metrics"
METRICS_PORT = 9095  # not 9090 (a Prometheus server's own) nor 8080 (the controller's)
METRICS_PORT_ENV = "LONGRUN_METRICS_PORT"  # read by the runner (runners/metrics.py)


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
    """Environment of the runner: contract path, identity, metrics port, then the config's own."""
    env: list[Manifest] = [
        {"name": "CONTRACT_PATH", "value": DEFAULT_CONTRACT_PATH},
        _field_env("POD_UID", "metadata.uid"),
        _field_env("pod_uid", "metadata.uid"),
        {"name": "JOB_ID", "value": resolved.run.uid},
        _field_env("JOB_NAME", f"metadata.labels['{JOB_NAME_LABEL}']"),
        {"name": "RUN_NAME", "value": resolved.run.name},
        {"name": "RUN_NAMESPACE", "value": resolved.run.namespace},
        {"name": "RUN_UID", "value": resolved.run.uid},
        {"name": METRICS_PORT_ENV, "value": str(METRICS_PORT)},
    ]
    if model_token(resolved.config_spec) is not None:
        env.append({"name": MODEL_TOKEN_PATH_ENV, "value": MODEL_TOKEN_PATH})
    for var in resolved.config_spec.pod.env:
        if var.secret_key_ref is not None:
            ref = var.secret_key_ref
            source = {"secretKeyRef": {"name": ref.name, "key": ref.key}}
            env.append({"name": var.name, "valueFrom": source})
        else:
            env.append({"name": var.name, "value": var.value})
    return env


def model_token(spec: InferenceConfigSpec) -> ServiceAccountToken | None:
    """The ServiceAccount token the runner sends to the model, if `model.auth` asks for one."""
    auth = spec.model.auth if spec.model is not None else None
    return auth.service_account_token if auth is not None else None


def model_token_volume(token: ServiceAccountToken) -> tuple[Manifest, Manifest]:
    """The projected volume holding the pod's ServiceAccount token, and its runner mount."""
    source = {
        "audience": token.audience,
        "expirationSeconds": token.expiration_seconds,
        "path": MODEL_TOKEN_FILE,
    }
    volume = {
        "name": MODEL_TOKEN_VOLUME,
        "projected": {"sources": [{"serviceAccountToken": source}], "defaultMode": 0o440},
    }
    mount = {"name": MODEL_TOKEN_VOLUME, "mountPath": MODEL_TOKEN_DIR, "readOnly": True}
    return volume, mount


def volumes_and_mounts(resolved: Resolved) -> tuple[list[Manifest], list[Manifest]]:
    """Pod volumes and runner mounts: contract (read-only), /tmp, claims, one per Secret, and
    the model's ServiceAccount token when asked for."""
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
    if (token := model_token(resolved.config_spec)) is not None:
        token_volume, token_mount = model_token_volume(token)
        volumes.append(token_volume)
        mounts.append(token_mount)
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
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
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
    if resolved.spec.priority_class_name is not None:  # allowed by controller/core/kueue/policy
        spec["priorityClassName"] = resolved.spec.priority_class_name
    metadata = {
        "labels": {**pod.labels, **labels_of(resolved.run)},
        "annotations": {**pod.annotations, names.RUN_ANNOTATION: resolved.run.name},
    }
    return {"metadata": metadata, "spec": spec}
