"""What creating a ModelDeployment lets someone put into a pod, and what it lets them claim
(Ingress hosts, certificates, Service types), under the defaults and the settings that
loosen each rule; every refusal names the field and the setting (issue 26, findings 3, 5).

Real: decide_deployment on plain dicts, the settings as the chart's environment sets them
(serving_settings_from_env), the status it reports. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from contracts.serving import ModelDeploymentStatus
from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from tests.controller.unit.serving.objects import GGUF, SKLEARN, decide, deployment

DEFAULTS = serving_settings_from_env({})  # what a controller started without settings does
Refusal = tuple[str, str]  # (reason, message)


def refusal(obj: dict[str, Any], settings: ServingSettings = DEFAULTS) -> Refusal | None:
    """(reason, message) of the deployment's refusal, or None when it is accepted."""
    decision = decide(obj, settings=settings)
    status: ModelDeploymentStatus = decision.status
    if status.phase != "Failed":
        assert decision.writes, status.message
        return None
    available = next(c for c in status.conditions if c.type == "Available")
    assert not decision.writes
    return available.reason, status.message or ""


def generic(image: str, **runtime: Any) -> dict[str, Any]:
    block = {"image": image, "port": 8000, "protocol": "kserve-v2", **runtime}
    return deployment("srv", model=dict(SKLEARN), runtime={"generic": block})


# -- images and command lines ----------------------------------------------------------------


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/ggml-org/llama.cpp:server",
        "ghcr.io/ggml-org/llama.cpp:server-b4120",
        "ghcr.io/ggml-org/llama.cpp@sha256:" + "a" * 64,
    ],
)
def test_the_default_images_are_the_shipped_runtimes_at_any_tag_or_digest(image: str) -> None:
    assert refusal(deployment(runtime={"llamacpp": {"image": image}})) is None


@pytest.mark.parametrize(
    "runtime",
    [
        {"llamacpp": {"image": "busybox:1.36"}},
        {"kserve": {"image": "registry.evil.example/kserve/sklearnserver:v0.14.1"}},
        {"generic": {"image": "busybox:1.36", "port": 8000, "protocol": "kserve-v2"}},
    ],
    ids=["llamacpp", "kserve-lookalike", "generic"],
)
def test_any_other_image_is_refused_naming_the_setting(runtime: dict[str, Any]) -> None:
    kind = next(iter(runtime))
    model = GGUF if kind == "llamacpp" else SKLEARN
    found = refusal(deployment("srv", model=dict(model), runtime=runtime))
    assert found is not None
    reason, message = found
    assert reason == "ImageNotAllowed"
    assert message.startswith(f"spec.runtime.{kind}.image: image ")
    assert "ALLOWED_SERVING_IMAGES (chart: serving.allowedImages)" in message


def test_allowed_images_open_more_images() -> None:
    settings = serving_settings_from_env({"ALLOWED_SERVING_IMAGES": "registry.internal/*"})
    assert refusal(generic("registry.internal/ml/server:1"), settings) is None


@pytest.mark.parametrize("field", ["command", "args"])
def test_a_command_line_on_a_shipped_image_needs_the_opt_in(field: str) -> None:
    # With a strict image list, the generic runtime on a runtime image still ran any code.
    obj = generic("seldonio/mlserver:1.7.1", **{field: ["python", "-c", "print(1)"]})
    found = refusal(obj)
    assert found is not None
    reason, message = found
    assert reason == "CommandNotAllowed"
    assert message.startswith(f"spec.runtime.generic.{field}: ")
    assert "SERVING_ALLOW_CUSTOM_COMMANDS=true (chart: serving.allowCustomCommands" in message
    settings = serving_settings_from_env({"SERVING_ALLOW_CUSTOM_COMMANDS": "true"})
    assert refusal(obj, settings) is None


def test_a_generic_server_without_a_command_line_runs_its_image_entrypoint() -> None:
    assert refusal(generic("seldonio/mlserver:1.7.1")) is None


# -- environment -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["mlserver_host", "Mlserver_Http_Port", "ld_preload", "pythonpath", "model_path",
     "llama_api_key", "LLAMA_ARG_API_KEY", "llama_arg_hf_repo", "Home"],
)  # fmt: skip
def test_env_names_are_compared_without_regard_to_case(name: str) -> None:
    # MLServer's pydantic-settings reads mlserver_host as MLSERVER_HOST: 0.0.0.0 would take
    # the server out from behind the key check.
    found = refusal(deployment(env=[{"name": name, "value": "0.0.0.0"}]))
    assert found is not None and found[0] == "EnvNotAllowed"
    assert found[1].startswith("spec.env[0].name: ")


def test_env_secrets_need_the_allow_list() -> None:
    env = [{"name": "HF_TOKEN", "secretKeyRef": {"name": "hf-token", "key": "token"}}]
    found = refusal(deployment(env=env))
    assert found is not None
    reason, message = found
    assert reason == "EnvSecretNotAllowed"
    assert message.startswith('spec.env[0].secretKeyRef.name: Secret "hf-token"')
    assert "ALLOWED_SERVING_ENV_SECRETS (chart: serving.allowedEnvSecrets)" in message
    settings = serving_settings_from_env({"ALLOWED_SERVING_ENV_SECRETS": "hf-*"})
    assert refusal(deployment(env=env), settings) is None


@pytest.mark.parametrize("secret", ["chat-api-keys", "other-api-keys", "x" * 240 + "-0a1b2c3d"])
def test_an_api_key_secret_is_never_nameable_whatever_the_allow_list(secret: str) -> None:
    everything = serving_settings_from_env({"ALLOWED_SERVING_ENV_SECRETS": "*"})
    env = [{"name": "KEYS", "secretKeyRef": {"name": secret, "key": "api-keys"}}]
    found = refusal(deployment(env=env), everything)
    assert found is not None and found[0] == "SecretNotAllowed"
    assert found[1].startswith("spec.env[0].secretKeyRef.name: ")
    # Nor may cert-manager be told to write a certificate over one.
    tls = {"issuerRef": {"name": "own"}, "secretName": secret}
    endpoint = {"ingress": {"host": "chat.example.com"}, "tls": tls}
    hosts = serving_settings_from_env({"ALLOWED_SERVING_HOSTS": "*.example.com"})
    found = refusal(deployment(endpoint=endpoint), hosts)
    assert found is not None and found[0] == "SecretNotAllowed"
    assert found[1].startswith("spec.endpoint.tls.secretName: ")


# -- Ingress hosts, issuers and Service types --------------------------------------------------


def test_no_ingress_host_is_allowed_by_default() -> None:
    found = refusal(deployment(endpoint={"ingress": {"host": "chat.example.com"}}))
    assert found is not None
    reason, message = found
    assert reason == "HostNotAllowed"
    assert message.startswith('spec.endpoint.ingress.host: host "chat.example.com" ')
    assert "ALLOWED_SERVING_HOSTS (chart: serving.ingress.allowedHosts" in message


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("chat.team.apps.example.com", True),
        ("api-team.apps.example.com", True),
        ("chat.other.apps.example.com", False),  # another namespace's subdomain
        ("a.b.team.apps.example.com", False),  # `*` is one label
        ("team.apps.example.com", False),
        ("chat.team.apps.example.com.evil.example", False),
    ],
)
def test_hosts_follow_the_namespace_patterns(host: str, allowed: bool) -> None:
    settings = serving_settings_from_env(
        {"ALLOWED_SERVING_HOSTS": "*.{namespace}.apps.example.com,api-{namespace}.apps.example.com"}
    )
    found = refusal(deployment(endpoint={"ingress": {"host": host}}), settings)
    assert (found is None) == allowed, found


def test_a_cluster_issuer_needs_the_allow_list_and_a_namespace_issuer_does_not() -> None:
    hosts = {"ALLOWED_SERVING_HOSTS": "*.example.com"}

    def tls(kind: str) -> dict[str, Any]:
        issuer = {"name": "letsencrypt", "kind": kind}
        return {"ingress": {"host": "chat.example.com"}, "tls": {"issuerRef": issuer}}

    found = refusal(deployment(endpoint=tls("ClusterIssuer")), serving_settings_from_env(hosts))
    assert found is not None
    reason, message = found
    assert reason == "IssuerNotAllowed"
    assert message.startswith('spec.endpoint.tls.issuerRef: ClusterIssuer "letsencrypt" ')
    assert "ALLOWED_SERVING_CLUSTER_ISSUERS (chart: serving.tls.allowedClusterIssuers)" in message
    assert refusal(deployment(endpoint=tls("Issuer")), serving_settings_from_env(hosts)) is None
    issuers = serving_settings_from_env({**hosts, "ALLOWED_SERVING_CLUSTER_ISSUERS": "lets*"})
    assert refusal(deployment(endpoint=tls("ClusterIssuer")), issuers) is None


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_service_types_beyond_cluster_ip_need_the_allow_list(kind: str) -> None:
    obj = deployment(endpoint={"serviceType": kind})
    found = refusal(obj)
    assert found is not None
    reason, message = found
    assert reason == "ServiceTypeNotAllowed"
    assert message.startswith(f"spec.endpoint.serviceType: Service type {kind} ")
    assert "ALLOWED_SERVING_SERVICE_TYPES (chart: serving.allowedServiceTypes)" in message
    assert refusal(obj, serving_settings_from_env({"ALLOWED_SERVING_SERVICE_TYPES": kind})) is None
    assert refusal(deployment(endpoint={"serviceType": "ClusterIP"})) is None
