"""The children a ModelDeployment renders: the pod (security, probes, init container, cache,
keys), the cache PVC and ownership, for every runtime.

Real: the pure builders and decide_deployment on plain dicts. Faked: nothing; the random
source is pinned so the generated keys are known.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from controller.core.serving import builders, names
from controller.core.serving.decide import ServingDecision
from controller.core.serving.runtimes import CACHE_MOUNT
from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from controller.core.settings import SettingsError
from tests.controller.unit.serving.objects import (
    RUNTIMES,
    SETTINGS,
    UID,
    created,
    decide,
    deployment,
    for_runtime,
    keys_in,
    resolved,
)

# The volume types the "restricted" Pod Security Standard allows.
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
}  # fmt: skip


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What in a pod spec breaks the "restricted" Pod Security Standard (v1.30 rules)."""
    found = []
    sc = pod.get("securityContext") or {}
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        found.append("host namespaces")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {kinds}")
    for c in [*(pod.get("initContainers") or []), *pod["containers"]]:
        csc = c.get("securityContext") or {}
        name = c["name"]
        if csc.get("privileged"):
            found.append(f"{name}: privileged")
        if csc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: privilege escalation")
        if csc.get("capabilities", {}).get("drop") != ["ALL"] or csc["capabilities"].get("add"):
            found.append(f"{name}: capabilities")
        if not (csc.get("runAsNonRoot") or sc.get("runAsNonRoot")):
            found.append(f"{name}: may run as root")
        if 0 in (csc.get("runAsUser"), sc.get("runAsUser")):
            found.append(f"{name}: runs as UID 0")
        seccomp = (csc.get("seccompProfile") or sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccomp")
        if not csc.get("readOnlyRootFilesystem"):
            found.append(f"{name}: writable root filesystem")  # ours, stricter than PSS
        if any(p.get("hostPort") for p in c.get("ports") or []):
            found.append(f"{name}: hostPort")
    return found


def pod_of(decision: ServingDecision) -> dict[str, Any]:
    return created(decision)["Deployment"]["spec"]["template"]["spec"]


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(
        c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name
    )


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_renders_the_children_of_each_runtime(runtime: str) -> None:
    kinds = set(created(decide(for_runtime(runtime))))
    base = {"Secret", "Deployment", "Service"}
    sidecar = {"ConfigMap", "NetworkPolicy"} if runtime != "llamacpp" else set()
    assert kinds == base | sidecar


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_pods_pass_restricted_pod_security(runtime: str) -> None:
    obj = for_runtime(runtime, cache={"storage": "pvc"}, resources={"gpu": 1})
    pod = pod_of(decide(obj))
    assert restricted_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_no_api_key_reaches_a_config_map_an_env_value_or_the_status(runtime: str) -> None:
    decision = decide(for_runtime(runtime, env=[{"name": "LOG_LEVEL", "value": "info"}]))
    keys = keys_in(created(decision)["Secret"])
    forms = [*keys, *(base64.b64encode(k.encode()).decode() for k in keys)]
    others = [w.body for w in decision.writes if w.kind != "Secret"]
    text = json.dumps([others, decision.status.to_wire()])
    assert keys and not [f for f in forms if f in text]
    for body in others:
        if body["kind"] == "ConfigMap":
            assert set(body["data"]) == {names.NGINX_CONF_KEY}


def test_keys_are_mounted_from_the_secret_never_from_a_config_map() -> None:
    for runtime in RUNTIMES:
        pod = pod_of(decide(for_runtime(runtime)))
        keys = next(v for v in pod["volumes"] if v["name"] == "api-keys")
        assert keys["secret"]["secretName"] == f"{runtime}-api-keys"
        assert keys["secret"]["defaultMode"] == 0o440


def test_runtime_gets_the_model_read_only_from_the_cache_the_init_container_fills() -> None:
    obj = deployment(model={**RUNTIMES["llamacpp"][0], "sha256": "ab" * 32})
    pod = pod_of(decide(obj))
    fetch = container(pod, names.FETCH_CONTAINER)
    dest = fetch["args"][1]
    assert fetch["command"] == ["longrun-fetch"]
    assert fetch["args"][:4] == [
        "hf://org/chat-GGUF/chat.Q4_K_M.gguf@main",
        dest,
        "--sha256",
        "ab" * 32,
    ]
    assert dest.startswith(f"{CACHE_MOUNT}/") and dest.endswith("/model.gguf")
    assert {"name": "model-cache", "mountPath": CACHE_MOUNT} in fetch["volumeMounts"]
    server = container(pod, names.RUNTIME_CONTAINER)
    assert {"name": "model-cache", "mountPath": CACHE_MOUNT, "readOnly": True} in server[
        "volumeMounts"
    ]
    assert server["args"][server["args"].index("--model") + 1] == dest


def test_download_reads_credentials_from_a_mounted_secret_and_hf_endpoint_from_settings() -> None:
    model = {
        **RUNTIMES["kserve"][0],
        "credentials": {"name": "s3-keys"},
        "endpointUrl": "http://minio:9000",
    }
    settings = ServingSettings(hf_endpoint="http://hf-mirror.local")
    pod = pod_of(decide(deployment(model=model, runtime={"kserve": {}}), settings=settings))
    fetch = container(pod, names.FETCH_CONTAINER)
    assert fetch["args"][2:6] == [
        "--endpoint-url",
        "http://minio:9000",
        "--credentials-dir",
        "/var/run/longrun/model-credentials",
    ]
    assert {"name": "HF_ENDPOINT", "value": "http://hf-mirror.local"} in fetch["env"]
    volume = next(v for v in pod["volumes"] if v["name"] == "model-credentials")
    assert volume["secret"]["secretName"] == "s3-keys"
    assert "model-credentials" not in json.dumps(container(pod, names.RUNTIME_CONTAINER))


def test_the_download_is_limited_to_the_cache_size_and_kept_off_denied_networks() -> None:
    pod = pod_of(decide(deployment()))
    fetch = container(pod, names.FETCH_CONTAINER)
    assert fetch["args"][-4:] == [
        "--max-size", "20Gi", "--redirect-hosts", "*.hf.co,*.huggingface.co",
    ]  # fmt: skip
    # Never the node's instance role: in boto's env, and in the program (runners/fetch_net.py).
    assert {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"} in fetch["env"]
    settings = ServingSettings(
        denied_cidrs=("169.254.0.0/16", "fd00:ec2::254/128"),
        fetch_redirect_hosts=(),
        fetch_instance_metadata=True,
    )
    sized = deployment(cache={"size": "3Gi"})
    fetch = container(pod_of(decide(sized, settings=settings)), names.FETCH_CONTAINER)
    assert fetch["args"][-5:] == [
        "--max-size", "3Gi", "--denied-cidrs", "169.254.0.0/16,fd00:ec2::254/128",
        "--allow-instance-metadata",
    ]  # fmt: skip
    assert "AWS_EC2_METADATA_DISABLED" not in json.dumps(fetch["env"])


def test_the_download_settings_are_read_from_the_controllers_environment() -> None:
    settings = serving_settings_from_env(
        {
            "DENIED_CIDRS": "169.254.0.0/16, 10.1.2.3",
            "SERVING_FETCH_REDIRECT_HOSTS": "*.cdn.example.com",
            "SERVING_FETCH_INSTANCE_METADATA": "true",
        }
    )
    assert settings.denied_cidrs == ("169.254.0.0/16", "10.1.2.3/32")
    assert settings.fetch_redirect_hosts == ("*.cdn.example.com",)
    assert settings.fetch_instance_metadata
    defaults = serving_settings_from_env({})
    assert defaults.fetch_redirect_hosts == ("*.hf.co", "*.huggingface.co")
    assert not defaults.fetch_instance_metadata and defaults.denied_cidrs == ()
    with pytest.raises(SettingsError, match="DENIED_CIDRS"):
        serving_settings_from_env({"DENIED_CIDRS": "metadata.internal"})


def test_changing_the_source_downloads_to_a_new_place() -> None:
    one = resolved(deployment())
    other = {**RUNTIMES["llamacpp"][0], "source": "hf://org/other/x.gguf"}
    assert resolved(deployment(model=other)).layout.path != one.layout.path


def test_the_default_hugging_face_revision_is_the_same_cache_entry() -> None:
    plain = {"source": "hf://org/chat-GGUF/chat.gguf", "format": "gguf"}
    main = {**plain, "source": "hf://org/chat-GGUF/chat.gguf@main"}
    assert (
        resolved(deployment(model=plain)).layout.path
        == resolved(deployment(model=main)).layout.path
    )


def test_a_pvc_model_is_used_in_place_without_a_download() -> None:
    model = {"source": "pvc://model-store/llama/chat.gguf", "format": "gguf"}
    pod = pod_of(decide(deployment(model=model)))
    assert "initContainers" not in pod
    server = container(pod, names.RUNTIME_CONTAINER)
    mount = next(m for m in server["volumeMounts"] if m["mountPath"] == "/mnt/source/model-store")
    assert mount["readOnly"] is True
    assert "/mnt/source/model-store/llama/chat.gguf" in server["args"]
    claim = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert claim["persistentVolumeClaim"] == {"claimName": "model-store", "readOnly": True}


def test_a_pvc_model_with_sha256_is_verified_in_place() -> None:
    model = {"source": "pvc://model-store/chat.gguf", "format": "gguf", "sha256": "cd" * 32}
    fetch = container(pod_of(decide(deployment(model=model))), names.FETCH_CONTAINER)
    assert fetch["args"] == [
        "pvc://model-store/chat.gguf",
        "/mnt/source/model-store/chat.gguf",
        "--sha256",
        "cd" * 32,
    ]


def test_probes_hit_the_runtime_health_endpoint() -> None:
    server = container(
        pod_of(decide(deployment(startupTimeoutSeconds=600))), names.RUNTIME_CONTAINER
    )
    assert server["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8080}
    assert server["startupProbe"]["httpGet"] == {"path": "/health", "port": 8080}
    assert (
        server["startupProbe"]["failureThreshold"] * server["startupProbe"]["periodSeconds"] == 600
    )


def test_gpus_become_nvidia_limits_and_replace_pods_one_at_a_time() -> None:
    body = created(decide(deployment(resources={"cpu": "2", "memory": "8Gi", "gpu": 2})))[
        "Deployment"
    ]
    server = container(body["spec"]["template"]["spec"], names.RUNTIME_CONTAINER)
    assert server["resources"] == {
        "requests": {"cpu": "2", "memory": "8Gi"},
        "limits": {"memory": "8Gi", "nvidia.com/gpu": 2},
    }
    assert body["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_cpu_pods_roll_with_a_surge_and_single_pod_claims_recreate() -> None:
    plain = created(decide(deployment()))["Deployment"]["spec"]["strategy"]
    assert plain["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    rwop = deployment(cache={"storage": "pvc", "accessMode": "ReadWriteOncePod"})
    assert created(decide(rwop))["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}


def test_user_env_passes_literals_and_secret_references_only() -> None:
    env = [
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": "HF_TOKEN", "secretKeyRef": {"name": "hf", "key": "token"}},
    ]
    settings = replace(SETTINGS, allowed_env_secrets=("hf",))
    server = container(
        pod_of(decide(deployment(env=env), settings=settings)), names.RUNTIME_CONTAINER
    )
    assert {"name": "LOG_LEVEL", "value": "debug"} in server["env"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    } in server["env"]


def test_pod_knobs_reach_the_pod() -> None:
    obj = deployment(
        nodeSelector={"gpu": "a100"},
        imagePullSecrets=[{"name": "regcred"}],
    )
    pod = pod_of(decide(obj))
    assert pod["nodeSelector"] == {"gpu": "a100"}
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_every_child_is_owned_by_the_deployment() -> None:
    endpoint = {"ingress": {"host": "a.example.com"}, "tls": {"issuerRef": {"name": "ca"}}}
    obj = for_runtime(
        "kserve", cache={"storage": "pvc"}, autoscaling={"maxReplicas": 3}, endpoint=endpoint
    )
    bodies = created(decide(obj))
    assert len(bodies) == 9
    for body in bodies.values():
        refs = body["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": "longrun.dev/v1alpha1",
                "kind": "ModelDeployment",
                "name": "kserve",
                "uid": UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert body["metadata"]["labels"][names.DEPLOYMENT_LABEL] == "kserve"


def test_a_retained_cache_claim_has_no_owner_so_it_outlives_the_deployment() -> None:
    obj = deployment(
        cache={"storage": "pvc", "size": "5Gi", "retainPolicy": "Retain", "storageClassName": "ssd"}
    )
    claim = created(decide(obj))["PersistentVolumeClaim"]
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["name"] == "chat-model-cache"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "ssd",
    }


def test_the_cache_claim_size_defaults_to_the_setting() -> None:
    claim = builders.build_cache_claim(
        resolved(deployment(cache={"storage": "pvc"})), ServingSettings(default_cache_size="7Gi")
    )
    assert claim is not None and claim["spec"]["resources"]["requests"]["storage"] == "7Gi"


def test_an_empty_dir_cache_is_limited_to_its_size() -> None:
    pod = pod_of(decide(deployment(cache={"size": "3Gi"})))
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "3Gi"}} in pod["volumes"]
    assert "PersistentVolumeClaim" not in created(decide(deployment(cache={"size": "3Gi"})))


def test_the_spec_hash_leaves_replicas_out() -> None:
    r = resolved(deployment())
    one = builders.build_deployment(r, ServingSettings(), replicas=1, keys_version=None)
    three = builders.build_deployment(r, ServingSettings(), replicas=3, keys_version=None)
    key = names.SPEC_HASH_ANNOTATION
    assert one["metadata"]["annotations"][key] == three["metadata"]["annotations"][key]


def test_long_names_fit_and_stay_distinct() -> None:
    long_a, long_b = "m" * 70 + "-a", "m" * 70 + "-b"
    assert names.deployment_name(long_a) != names.deployment_name(long_b)
    assert len(names.deployment_name(long_a)) <= 63
    assert len(names.service_name(long_a)) <= 63
    assert len(names.label_value(long_a)) <= 63
