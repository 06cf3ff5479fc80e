"""The runner pod of a config whose model takes a ServiceAccount token, and the contract rule.

Real: contracts (pydantic validation), the pure builders (Job, CronJob, pod template), and
controller.core.serving.uses resolving a deploymentRef from a deployment's status. Faked:
nothing; objects are plain dicts as the API server returns them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from contracts.auth import MODEL_TOKEN_DIR, MODEL_TOKEN_PATH, MODEL_TOKEN_PATH_ENV
from contracts.config import InferenceConfigSpec
from controller.core import builders
from controller.core.children import Resolved
from controller.core.serving import uses
from controller.core.settings import Settings
from tests.controller.unit.objects import CONFIG_SPEC, resolved

SETTINGS = Settings(default_runner_image="ghcr.io/longrun/runner:default")
TOKEN = {"serviceAccountToken": {"audience": "models.example", "expirationSeconds": 1200}}


def with_auth(auth: dict[str, Any]) -> dict[str, Any]:
    model = {**copy.deepcopy(CONFIG_SPEC["model"]), "auth": auth}
    return model


def pod_spec(res: Resolved) -> dict[str, Any]:
    return builders.build_job(res, SETTINGS)["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_a_token_config_gets_a_projected_token_volume_with_its_audience_and_lifetime() -> None:
    spec = pod_spec(resolved(model=with_auth(TOKEN)))
    [volume] = [v for v in spec["volumes"] if "projected" in v]
    assert volume["projected"]["sources"] == [
        {
            "serviceAccountToken": {
                "audience": "models.example",
                "expirationSeconds": 1200,
                "path": "token",
            }
        }
    ]
    [container] = spec["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": MODEL_TOKEN_DIR, "readOnly": True}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[MODEL_TOKEN_PATH_ENV] == MODEL_TOKEN_PATH
    assert spec["automountServiceAccountToken"] is False  # the API token stays out


def test_the_default_lifetime_is_an_hour() -> None:
    auth = {"serviceAccountToken": {"audience": "models.example"}}
    spec = pod_spec(resolved(model=with_auth(auth)))
    [volume] = [v for v in spec["volumes"] if "projected" in v]
    assert volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3600


def test_no_token_volume_without_a_token_nor_with_a_key() -> None:
    for res in (resolved(), resolved(model=with_auth({"secretRef": {"name": "k", "key": "v"}}))):
        spec = pod_spec(res)
        assert not [v for v in spec["volumes"] if "projected" in v]
        [container] = spec["containers"]
        assert MODEL_TOKEN_PATH_ENV not in {e["name"] for e in container["env"]}


def test_a_scheduled_run_gets_the_token_volume_too() -> None:
    cron = builders.build_cron_job(
        resolved({"schedule": "*/5 * * * *"}, model=with_auth(TOKEN)), SETTINGS
    )
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"] if "projected" in v] == ["model-token"]


def test_the_token_is_not_in_the_contract_only_its_audience() -> None:
    contract = builders.build_contract(resolved(model=with_auth(TOKEN)))
    auth = contract.model.auth if contract.model is not None else None
    assert auth is not None and auth.service_account_token is not None
    assert auth.service_account_token.audience == "models.example" and auth.secret_ref is None


@pytest.mark.parametrize(
    ("auth", "words"),
    [
        (
            {"secretRef": {"name": "k", "key": "v"}, **TOKEN},
            "set exactly one of secretRef and serviceAccountToken",
        ),
        ({"header": "X-API-Key"}, "set exactly one of secretRef and serviceAccountToken"),
        (
            {"serviceAccountToken": {"audience": "a", "expirationSeconds": 300}},
            "greater than or equal to 600",
        ),
        ({"serviceAccountToken": {"audience": ""}}, "at least 1 character"),
        ({"serviceAccountToken": {"expirationSeconds": 3600}}, "audience"),
    ],
)
def test_the_contract_refuses_a_bad_auth(auth: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        InferenceConfigSpec.model_validate({**CONFIG_SPEC, "model": with_auth(auth)})


def test_http_storage_takes_a_key_only() -> None:
    output = {"http": {"url": "http://sink:8080/", "auth": TOKEN}}
    with pytest.raises(ValidationError, match="serviceAccountToken"):
        InferenceConfigSpec.model_validate(
            {**CONFIG_SPEC, "storage": {**CONFIG_SPEC["storage"], "output": output}}
        )


# -- a config that uses a ModelDeployment ---------------------------------------------------

STATUS = {
    "phase": "Running",
    "endpoint": "http://qwen.models.svc.cluster.local:8080",
    "protocol": "openai-chat",
    "modelName": "qwen",
    "apiKeySecret": "qwen-api-keys",
    "conditions": [
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
    ],
}


def deployment_config(auth: dict[str, Any] | None) -> dict[str, Any]:
    model: dict[str, Any] = {"deploymentRef": {"name": "qwen", "namespace": "models"}}
    if auth is not None:
        model["auth"] = auth
    return {
        "metadata": {"name": "cfg", "namespace": "team"},
        "spec": {**copy.deepcopy(CONFIG_SPEC), "model": model},
    }


def deployment() -> dict[str, Any]:
    return {
        "metadata": {"name": "qwen", "namespace": "models", "uid": "d-uid"},
        "spec": {"allowedNamespaces": ["team"]},
        "status": copy.deepcopy(STATUS),
    }


def resolve(cfg: dict[str, Any]) -> Any:
    spec = InferenceConfigSpec.model_validate(cfg["spec"])
    return uses.with_deployment(spec, cfg, deployment(), run_namespace="team", scheduled=False)


def test_a_run_in_another_namespace_without_auth_is_still_refused() -> None:
    refused = resolve(deployment_config(None))
    assert refused.reason == "SecretInOtherNamespace"
    assert "model.auth.serviceAccountToken" in refused.message


def test_a_run_in_another_namespace_may_send_its_token_and_never_gets_the_key() -> None:
    spec = resolve(deployment_config(TOKEN))
    assert isinstance(spec, InferenceConfigSpec) and spec.model is not None
    assert spec.model.url == STATUS["endpoint"] and spec.model.auth is not None
    assert spec.model.auth.secret_ref is None
    res = resolved()
    res = Resolved(res.run, res.spec, res.config, spec)
    pod = pod_spec(res)
    secrets = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    assert "qwen-api-keys" not in secrets
    assert [v["name"] for v in pod["volumes"] if "projected" in v] == ["model-token"]
    contract = builders.build_contract(res)
    assert "qwen-api-keys" not in contract.model_dump_json()
