"""`auth.oidc`: the contract's rules, and what the builders make of it (the verifier container,
its settings file, the nginx auth_request wiring, the volumes only the verifier sees).

Real: the contracts, resolve_deployment, the builders and decide on plain dicts. Faked: nothing
(the verifier itself is tested in tests/runners/test_tokencheck.py, nginx in front of it in
tests/local/test_token_sidecar.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from contracts.serving import AuthSpec
from controller.core.serving import builders, names, tokens
from controller.core.serving.runtimes import ServingImages
from controller.core.serving.settings import ServingSettings
from tests.controller.unit.serving.objects import (
    SETTINGS,
    created,
    decide,
    deployment,
    for_runtime,
    resolved,
)

ISSUER = "https://login.example.com/tenant"
OIDC = {"issuer": ISSUER, "audiences": ["api://models"]}
CLUSTER = {
    "issuer": "https://kubernetes.default.svc.cluster.local",
    "audiences": ["models.example"],
    "jwksUri": "https://kubernetes.default.svc/openid/v1/jwks",
    "claims": {"sub": ["system:serviceaccount:batch:runner"]},
}


def pod_of(obj: dict[str, Any], settings: ServingSettings = SETTINGS) -> dict[str, Any]:
    return builders.build_pod_template(
        resolved(obj, settings=settings), settings, keys_version="v1"
    )


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["spec"]["containers"]}


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["spec"]["volumes"]}


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"enabled": False, "oidc": OIDC}, "auth.oidc needs auth.enabled: true"),
        ({"apiKeys": False}, "auth.apiKeys: false needs auth.oidc"),
        ({"oidc": {**OIDC, "issuer": "http://login.example.com"}}, "not allowed: use https://"),
        ({"oidc": {**OIDC, "audiences": []}}, "at least 1 item"),
        ({"oidc": {**OIDC, "claims": {"sub": []}}}, "at least one allowed value"),
        ({"oidc": {**OIDC, "claims": {"with space": ["x"]}}}, "without spaces"),
        ({"oidc": {**OIDC, "jwksUri": "http://keys.example.com/jwks"}}, "use https://"),
    ],
)
def test_the_contract_refuses_an_oidc_block_that_cannot_work(
    auth: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        AuthSpec.model_validate(auth)


def test_auth_off_needs_nothing_else() -> None:
    spec = AuthSpec.model_validate({"enabled": False, "apiKeys": False})
    assert not spec.keys and not spec.tokens


def test_keys_and_tokens_side_by_side_get_the_verifier_beside_the_sidecar() -> None:
    pod = pod_of(for_runtime("kserve", auth={"oidc": OIDC}))
    found = containers(pod)
    assert set(found) == {
        names.RUNTIME_CONTAINER,
        names.AUTH_CONTAINER,
        names.TOKEN_CHECK_CONTAINER,
    }
    verifier = found[names.TOKEN_CHECK_CONTAINER]
    assert verifier["command"] == ["longrun-token-check"]
    assert verifier["args"] == [
        "--config",
        "/etc/longrun/auth-proxy/oidc.json",
        "--listen",
        "127.0.0.1:9099",
    ]
    assert verifier["image"] == SETTINGS.token_check_image
    assert verifier["securityContext"]["readOnlyRootFilesystem"]
    assert not verifier.get("ports")  # loopback only: nothing outside the pod may ask it
    sidecar_mounts = {m["name"] for m in found[names.AUTH_CONTAINER]["volumeMounts"]}
    assert "api-keys" in sidecar_mounts  # the keys still work


def test_the_settings_file_and_nginx_conf_are_in_the_sidecar_config_map() -> None:
    r = resolved(for_runtime("kserve", auth={"oidc": {**OIDC, "claims": {"groups": ["ml"]}}}))
    data = builders.build_auth_config_map(r)["data"]
    assert json.loads(data[names.OIDC_CONFIG_KEY]) == {
        "issuer": ISSUER,
        "audiences": ["api://models"],
        "claims": {"groups": ["ml"]},
        "jwksUri": None,
    }
    conf = data[names.NGINX_CONF_KEY]
    assert "auth_request /_longrun/token-check;" in conf
    assert "upstream longrun_token_check { server 127.0.0.1:9099; keepalive 8; }" in conf
    assert "proxy_pass http://longrun_token_check/check;" in conf
    assert "error_page 418 = @longrun_token;" in conf  # a valid key never asks the verifier
    assert "proxy_set_header X-Longrun-Key-Ok $longrun_key_ok;" in conf
    assert "include /etc/longrun/keys/nginx-keys.map;" in conf
    assert "internal;" in conf  # clients cannot call the check location themselves


def test_tokens_only_makes_no_keys_and_mounts_none() -> None:
    obj = for_runtime("kserve", auth={"apiKeys": False, "oidc": OIDC})
    pod = pod_of(obj)
    assert "api-keys" not in volumes(pod)
    assert names.KEYS_VERSION_ANNOTATION not in pod["metadata"]["annotations"]
    conf = builders.build_auth_config_map(resolved(obj))["data"][names.NGINX_CONF_KEY]
    assert "nginx-keys.map" not in conf and "{ default 0; }" in conf
    decision = decide(obj)
    assert "Secret" not in created(decision)
    assert decision.status.api_key_secret is None
    assert decision.status.token_audiences == ["api://models"]  # what runs must ask for
    assert decide(for_runtime("kserve")).status.token_audiences is None


def test_llamacpp_with_tokens_leaves_every_check_to_the_sidecar() -> None:
    r = resolved(deployment(auth={"oidc": OIDC}))
    args = list(r.plan.args)
    assert "--api-key-file" not in args and args[args.index("--host") + 1] == "127.0.0.1"
    assert r.uses_auth_proxy and r.proxy_checks_keys
    only_tokens = resolved(deployment(auth={"apiKeys": False, "oidc": OIDC}))
    assert "--api-key-file" not in only_tokens.plan.args and not only_tokens.proxy_checks_keys


def test_only_the_verifier_gets_the_cluster_api_token_for_the_cluster_issuer() -> None:
    pod = pod_of(for_runtime("kserve", auth={"oidc": CLUSTER}))
    assert pod["spec"]["automountServiceAccountToken"] is False
    access = volumes(pod)[tokens.API_ACCESS_VOLUME]["projected"]["sources"]
    assert {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}} in access
    found = containers(pod)
    verifier = found[names.TOKEN_CHECK_CONTAINER]
    assert verifier["args"][-2:] == ["--service-account-dir", tokens.API_ACCESS_MOUNT]
    for name, container in found.items():
        mounted = {m["name"] for m in container.get("volumeMounts") or []}
        assert (tokens.API_ACCESS_VOLUME in mounted) == (name == names.TOKEN_CHECK_CONTAINER)


def test_an_outside_issuer_gets_no_cluster_credentials() -> None:
    pod = pod_of(for_runtime("kserve", auth={"oidc": OIDC}))
    assert tokens.API_ACCESS_VOLUME not in volumes(pod)


def test_a_private_ca_is_mounted_for_the_verifier() -> None:
    oidc = {**OIDC, "caConfigMapRef": {"name": "corp-ca", "key": "bundle.pem"}}
    pod = pod_of(for_runtime("kserve", auth={"oidc": oidc}))
    ca = volumes(pod)[tokens.CA_VOLUME]["configMap"]
    assert ca == {"name": "corp-ca", "items": [{"key": "bundle.pem", "path": "ca.crt"}]}
    verifier = containers(pod)[names.TOKEN_CHECK_CONTAINER]
    assert verifier["args"][-2:] == ["--ca-file", "/etc/longrun/oidc-ca/ca.crt"]


def test_changing_the_audiences_rolls_the_pods() -> None:
    first = pod_of(for_runtime("kserve", auth={"oidc": OIDC}))["metadata"]["annotations"]
    other = {**OIDC, "audiences": ["api://other"]}
    second = pod_of(for_runtime("kserve", auth={"oidc": other}))["metadata"]["annotations"]
    assert first[tokens.TOKENS_ANNOTATION] != second[tokens.TOKENS_ANNOTATION]


def test_the_token_check_image_is_a_setting() -> None:
    settings = ServingSettings(
        images=ServingImages(), token_check_image="registry.example.com/longrun:1.2"
    )
    pod = pod_of(for_runtime("kserve", auth={"oidc": OIDC}), settings)
    assert (
        containers(pod)[names.TOKEN_CHECK_CONTAINER]["image"] == "registry.example.com/longrun:1.2"
    )


def test_a_generic_server_may_not_listen_on_the_verifier_port() -> None:
    obj = for_runtime("generic", auth={"oidc": OIDC})
    obj["spec"]["runtime"]["generic"]["port"] = 9099
    status = decide(obj).status
    assert next(c.reason for c in status.conditions if c.type == "Available") == "PortConflict"
    obj["spec"]["auth"] = {}  # keys only: no verifier, so the port is the server's
    assert decide(obj).writes
