"""Pure builders: a resolved ModelDeployment in, the Deployment, cache PVC, key Secret and
sidecar ConfigMap out (the network objects are in network.py).

As for runs (controller/core/builders.py), no I/O and no clock: the reconciler, the tests
and `longrun serve` render the same pod. The pod passes the Pod Security Standards
"restricted" profile: non-root, RuntimeDefault seccomp, no capabilities, no privilege
escalation and a read-only root filesystem (writable /tmp and model cache are volumes).
Keys reach containers only as files from the Secret; env values never carry one.
"""

from __future__ import annotations

import math
from typing import Any

from contracts.serving import API_KEYS_SECRET_KEY
from controller.core.builders import restricted_container_security, restricted_pod_security
from controller.core.names import claim_volume_name
from controller.core.serving import auth, names, tokens
from controller.core.serving.layout import CACHE_MOUNT, CREDENTIALS_MOUNT, SOURCE_MOUNT
from controller.core.serving.meta import child_metadata, with_spec_hash
from controller.core.serving.resolve import ServingResolved
from controller.core.serving.runtimes import KEYS_MOUNT
from controller.core.serving.settings import ServingSettings

Manifest = dict[str, Any]
CACHE_VOLUME = "model-cache"
CREDENTIALS_VOLUME = "model-credentials"
SHM_VOLUME = "dshm"
PROBE_PERIOD = 10
REVISION_HISTORY = 3


def build_deployment(
    r: ServingResolved,
    settings: ServingSettings,
    *,
    replicas: int,
    keys_version: str | None,
    revoke_old_keys: bool = False,
) -> Manifest:
    """The apps/v1 Deployment; its spec hash leaves `replicas` out (the scaler owns it).
    `keys_version` (status.apiKeys.version) changes when new keys are made: the pods roll.
    `revoke_old_keys` (keys.py) replaces the strategy by Recreate, which stops every pod
    still accepting older keys."""
    name = r.owner.name
    strategy = {"type": "Recreate"} if revoke_old_keys else rollout_strategy(r)
    spec: Manifest = {
        "replicas": replicas,
        "selector": {"matchLabels": names.selector_labels(name)},
        "strategy": strategy,
        "progressDeadlineSeconds": r.spec.startup_timeout_seconds
        + settings.download_deadline_seconds,
        "revisionHistoryLimit": REVISION_HISTORY,
        "template": build_pod_template(r, settings, keys_version=keys_version),
    }
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(r.owner, names.deployment_name(name)),
        "spec": spec,
    }
    return with_spec_hash(body, exclude=("replicas",))


def rollout_strategy(r: ServingResolved) -> Manifest:
    """How pods are replaced on an update.

    A surge pod needs a second GPU (or a second mount of a ReadWriteOncePod claim) that a
    cluster sized for `replicas` may not have, and the rollout would wait forever: GPU pods
    are replaced one at a time instead, single-pod claims all at once.
    """
    if r.spec.cache.storage == "pvc" and r.spec.cache.access_mode == "ReadWriteOncePod":
        return {"type": "Recreate"}
    if r.spec.resources is not None and r.spec.resources.gpu:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def build_pod_template(
    r: ServingResolved, settings: ServingSettings, *, keys_version: str | None
) -> Manifest:
    """The server pod: optional download init container, server, optional auth sidecar."""
    spec: Manifest = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {**restricted_pod_security(), "fsGroupChangePolicy": "OnRootMismatch"},
        "containers": [runtime_container(r)],
        "volumes": volumes(r),
    }
    if r.layout.fetch_args:
        spec["initContainers"] = [fetch_container(r, settings)]
    if r.has_sidecar:
        sidecar = auth.proxy_container(
            settings.images.auth_proxy,
            r.plan,
            guard=r.uses_auth_proxy,
            keys=r.proxy_checks_keys,
            metrics=r.metrics,
        )
        spec["containers"].append(sidecar)
    if r.oidc is not None:
        spec["containers"].append(tokens.verifier_container(settings.token_check_image, r.oidc))
    if r.spec.node_selector:
        spec["nodeSelector"] = dict(r.spec.node_selector)
    if r.spec.tolerations:
        spec["tolerations"] = [t.to_wire() for t in r.spec.tolerations]
    if r.spec.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s.name} for s in r.spec.image_pull_secrets]
    spec.update(placement(r))
    annotations = {names.DEPLOYMENT_ANNOTATION: r.owner.name}
    if r.spec.auth.keys and keys_version:
        annotations[names.KEYS_VERSION_ANNOTATION] = keys_version
    if r.oidc is not None:
        annotations[tokens.TOKENS_ANNOTATION] = tokens.config_digest(r.oidc)
    metadata = {"labels": names.labels(r.owner.name), "annotations": annotations}
    return {"metadata": metadata, "spec": spec}


def placement(r: ServingResolved) -> Manifest:
    """The pod's priority, runtime class, affinity and spread constraints (policy-checked in
    placement.py); a spread constraint without a selector spreads the deployment's own pods."""
    out: Manifest = {}
    if r.spec.priority_class_name is not None:
        out["priorityClassName"] = r.spec.priority_class_name
    if r.spec.runtime_class_name is not None:
        out["runtimeClassName"] = r.spec.runtime_class_name
    if r.spec.affinity is not None:
        out["affinity"] = r.spec.affinity.to_wire()
    own = {"matchLabels": names.selector_labels(r.owner.name)}
    spread = [{"labelSelector": own, **c.to_wire()} for c in r.spec.topology_spread_constraints]
    if spread:
        out["topologySpreadConstraints"] = spread
    return out


def runtime_container(r: ServingResolved) -> Manifest:
    """The model server container, probed on its health endpoint."""
    plan = r.plan
    container: Manifest = {
        "name": names.RUNTIME_CONTAINER,
        "image": plan.image,
        "env": [{"name": k, "value": v} for k, v in plan.env] + _user_env(r),
        "ports": _runtime_ports(r),
        "volumeMounts": _runtime_mounts(r),
        "resources": resources(r),
        "securityContext": restricted_container_security(),
        "startupProbe": _probe(
            r, failures=math.ceil(r.spec.startup_timeout_seconds / PROBE_PERIOD)
        ),
        "readinessProbe": _probe(r, failures=3),
    }
    if plan.command:
        container["command"] = list(plan.command)
    if plan.args:
        container["args"] = list(plan.args)
    return container


def _user_env(r: ServingResolved) -> list[Manifest]:
    env: list[Manifest] = []
    for var in r.spec.env:
        if var.secret_key_ref is not None:
            ref = {"name": var.secret_key_ref.name, "key": var.secret_key_ref.key}
            env.append({"name": var.name, "valueFrom": {"secretKeyRef": ref}})
        else:
            env.append({"name": var.name, "value": var.value})
    return env


def _runtime_ports(r: ServingResolved) -> list[Manifest]:
    # The Service targets the ports named http/grpc: the sidecar's when it checks the keys.
    prefix = "server-" if r.uses_auth_proxy else ""
    ports = [("http", r.plan.http_port), ("grpc", r.plan.grpc_port)]
    return [
        {"name": f"{prefix}{name}", "containerPort": port, "protocol": "TCP"}
        for name, port in ports
        if port is not None
    ]


def _probe(r: ServingResolved, *, failures: int) -> Manifest:
    plan = r.plan
    timing = {"periodSeconds": PROBE_PERIOD, "timeoutSeconds": 5, "failureThreshold": failures}
    if plan.health_path is None:
        return {"tcpSocket": {"port": plan.http_port or plan.grpc_port}, **timing}
    # Through the sidecar, which lets the health path pass without a key: the probe then
    # also checks that the sidecar answers. By number: the kubelet resolves a named probe
    # port among the probed container's own ports, and `http` is the sidecar's.
    port = auth.PROXY_HTTP_PORT if r.uses_auth_proxy else (plan.http_port or 0)
    return {"httpGet": {"path": plan.health_path, "port": port}, **timing}


def resources(r: ServingResolved) -> Manifest:
    """Requests and limits: memory limit = request unless set; GPUs as the deployment's
    accelerator resource (nvidia.com/gpu unless the controller or the deployment says)."""
    res = r.spec.resources
    if res is None:
        return {}
    requests = {k: v for k, v in (("cpu", res.cpu), ("memory", res.memory)) if v is not None}
    limits: Manifest = {}
    if res.cpu_limit is not None:
        limits["cpu"] = res.cpu_limit
    if (memory := res.memory_limit or res.memory) is not None:
        limits["memory"] = memory
    if res.gpu:
        limits[r.gpu_resource] = res.gpu
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def fetch_container(r: ServingResolved, settings: ServingSettings) -> Manifest:
    """The init container: `longrun-fetch SOURCE DEST [--sha256 X] ...` fills the cache once.

    The program's command line (it lives in the runner image, see docs/serving.md):
      longrun-fetch SOURCE DEST [--sha256 HEX] [--endpoint-url URL] [--credentials-dir DIR]
                    [--max-size SIZE] [--denied-cidrs CIDRS] [--redirect-hosts GLOBS]
                    [--allow-instance-metadata]
    SOURCE is the Model's URI. A single-file source is written to the file DEST; a
    directory source (s3://bucket/prefix/, hf://org/repo, a pvc:// directory) is mirrored
    under the directory DEST. A DEST that is already complete is kept: with --sha256, when
    its digest matches; without, when the `.longrun-complete` marker the program writes
    next to it after a successful fetch is there. Downloads go to DEST + `.partial` and are
    renamed into place, so a crash never leaves a half file that looks complete. For a
    pvc:// SOURCE, DEST is where the claim is mounted and the program only verifies
    --sha256. Credentials come from files named like the variables (AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, HF_TOKEN, BEARER_TOKEN) in DIR; HF_ENDPOINT
    points hf:// at a mirror. `fetch_limits` adds what it may reach and write: no connection to
    the controller's DENIED_CIDRS, https redirects only to SERVING_FETCH_REDIRECT_HOSTS, at
    most the cache's size, never the node's instance role unless allowed (the env also sets
    AWS_EC2_METADATA_DISABLED). Exit codes: 0 done or already there; 2 bad arguments, an
    unsupported source or a refusal (not retried by a person's fix alone); 3 sha256
    mismatch; 4 source not found or access denied; 5 transient network or storage error. A
    failure writes a one-line reason to /dev/termination-log (never a credential).
    """
    mounts: list[Manifest] = [{"name": auth.TMP_VOLUME, "mountPath": "/tmp"}]
    if r.layout.uses_cache:
        mounts.append({"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT})
    if r.layout.source_claim is not None:
        mounts.append(_source_mount(r.layout.source_claim))
    if r.model.credentials is not None:
        mounts.append(
            {"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_MOUNT, "readOnly": True}
        )
    env = [{"name": "HF_ENDPOINT", "value": settings.hf_endpoint}] if settings.hf_endpoint else []
    if not settings.fetch_instance_metadata:
        env.append({"name": "AWS_EC2_METADATA_DISABLED", "value": "true"})
    return {
        "name": names.FETCH_CONTAINER,
        "image": settings.fetch_image,
        "command": ["longrun-fetch"],
        "args": [*r.layout.fetch_args, *fetch_limits(r, settings)],
        "env": env,
        "volumeMounts": mounts,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": restricted_container_security(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def fetch_limits(r: ServingResolved, settings: ServingSettings) -> list[str]:
    """What the download may reach and write (runners/fetch_net.py): the controller's denied
    networks, the hosts an https redirect may go to, the cache's size, the instance role.
    None for a pvc:// model used in place: the program only checks its digest there."""
    if not r.layout.uses_cache:
        return []
    args = ["--max-size", str(r.spec.cache.size or settings.default_cache_size)]
    if settings.denied_cidrs:
        args += ["--denied-cidrs", ",".join(settings.denied_cidrs)]
    if settings.fetch_redirect_hosts:
        args += ["--redirect-hosts", ",".join(settings.fetch_redirect_hosts)]
    if settings.fetch_instance_metadata:
        args.append("--allow-instance-metadata")
    return args


def _source_mount(claim: str) -> Manifest:
    return {
        "name": claim_volume_name(claim),
        "mountPath": f"{SOURCE_MOUNT}/{claim}",
        "readOnly": True,
    }


def _runtime_mounts(r: ServingResolved) -> list[Manifest]:
    mounts: list[Manifest] = [{"name": auth.TMP_VOLUME, "mountPath": "/tmp"}]
    if r.layout.uses_cache:
        mounts.append({"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "readOnly": True})
    if r.layout.source_claim is not None and not r.layout.uses_cache:
        mounts.append(_source_mount(r.layout.source_claim))
    if r.plan.key_file is not None:
        mounts.append({"name": auth.KEYS_VOLUME, "mountPath": KEYS_MOUNT, "readOnly": True})
    if r.plan.shm_size is not None:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return mounts


def volumes(r: ServingResolved) -> list[Manifest]:
    """The pod's volumes: /tmp, the cache, a pvc:// source, credentials, keys, nginx config."""
    out: list[Manifest] = [{"name": auth.TMP_VOLUME, "emptyDir": {}}]
    if r.layout.uses_cache:
        out.append(_cache_volume(r))
    if (claim := r.layout.source_claim) is not None:
        source = {"claimName": claim, "readOnly": True}
        out.append({"name": claim_volume_name(claim), "persistentVolumeClaim": source})
    if r.model.credentials is not None and r.layout.fetch_args:
        secret = {"secretName": r.model.credentials.name, "defaultMode": 0o440}
        out.append({"name": CREDENTIALS_VOLUME, "secret": secret})
    secret_name = names.api_key_secret_name(r.owner.name)
    if r.plan.key_file is not None:
        out.append(auth.keys_volume(secret_name, API_KEYS_SECRET_KEY))
    if r.proxy_checks_keys:
        out.append(auth.keys_volume(secret_name, names.NGINX_KEYS_KEY))
    if r.has_sidecar:
        out.append(auth.config_volume(names.auth_config_name(r.owner.name)))
    if r.oidc is not None:
        out += tokens.verifier_volumes(r.oidc)
    if r.plan.shm_size is not None:
        # Memory-backed: PyTorch passes tensors between processes through /dev/shm, and the
        # container runtime's default is 64 MiB. It counts against the pod's memory limit.
        shm = {"medium": "Memory", "sizeLimit": r.plan.shm_size}
        out.append({"name": SHM_VOLUME, "emptyDir": shm})
    return out


def _cache_volume(r: ServingResolved) -> Manifest:
    cache = r.spec.cache
    if cache.storage == "pvc":
        claim = {"claimName": names.cache_claim_name(r.owner.name)}
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": claim}
    empty: Manifest = {"sizeLimit": cache.size} if cache.size is not None else {}
    return {"name": CACHE_VOLUME, "emptyDir": empty}


def build_cache_claim(r: ServingResolved, settings: ServingSettings) -> Manifest | None:
    """The cache PVC, or None (emptyDir, or a pvc:// model used in place).

    With `retainPolicy: Retain` it has no owner reference, so deleting the deployment keeps
    it (and a new deployment of the same name reuses the downloaded model).
    """
    cache = r.spec.cache
    if cache.storage != "pvc" or not r.layout.uses_cache:
        return None
    owned = cache.retain_policy == "Delete"
    spec: Manifest = {
        "accessModes": [cache.access_mode or "ReadWriteOnce"],
        "resources": {"requests": {"storage": cache.size or settings.default_cache_size}},
    }
    if cache.storage_class_name is not None:
        spec["storageClassName"] = cache.storage_class_name
    metadata = child_metadata(r.owner, names.cache_claim_name(r.owner.name), owned=owned)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def build_key_secret(r: ServingResolved, keys: tuple[str, ...]) -> Manifest:
    """The API-key Secret, recording the rotation request its keys were made for."""
    metadata = child_metadata(r.owner, names.api_key_secret_name(r.owner.name))
    metadata["annotations"][names.KEYS_ROTATED_FOR_ANNOTATION] = r.rotation
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": metadata,
        "data": auth.secret_data(keys),
    }


def build_auth_config_map(r: ServingResolved) -> Manifest:
    """The sidecar's nginx.conf (it names the key map's path; it holds no key), and the token
    verifier's oidc.json with `auth.oidc`."""
    conf = auth.nginx_conf(
        r.plan, keys=r.proxy_checks_keys, tokens=r.oidc is not None, metrics=r.metrics
    )
    data = {names.NGINX_CONF_KEY: conf}
    if r.oidc is not None:
        data[names.OIDC_CONFIG_KEY] = tokens.config_json(r.oidc)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(r.owner, names.auth_config_name(r.owner.name)),
        "data": data,
    }
