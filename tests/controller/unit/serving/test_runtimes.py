"""Each runtime's plan: image, command line, ports, health endpoint, protocol, key checking,
and the server container and sidecar the builders make of it.

Real: resolve_deployment, the runtime table and the builders on plain dicts. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.core.serving import auth, builders, names
from controller.core.serving.resolve import ServingResolved
from controller.core.serving.runtimes import ServingImages
from tests.controller.unit.serving.objects import SETTINGS, deployment, for_runtime, resolved


def args_of(r: ServingResolved) -> dict[str, str]:
    """`--flag value` and `--flag=value` pairs of a plan's arguments."""
    out: dict[str, str] = {}
    items = list(r.plan.args)
    for i, arg in enumerate(items):
        if "=" in arg:
            key, value = arg.split("=", 1)
            out[key] = value
        elif arg.startswith("--"):
            nxt = items[i + 1] if i + 1 < len(items) else ""
            out[arg] = "" if nxt.startswith("--") else nxt
    return out


def server(r: ServingResolved) -> dict[str, Any]:
    return builders.runtime_container(r)


@pytest.mark.parametrize(
    ("runtime", "protocol", "health"),
    [
        ("llamacpp", "openai-chat", "/health"),
        ("kserve", "kserve-v1", "/v1/models/kserve"),
        ("mlserver", "kserve-v2", "/v2/health/ready"),
        ("triton", "triton-grpc", "/v2/health/ready"),
        ("generic", "openai-chat", "/health"),
    ],
)
def test_each_runtime_has_its_protocol_and_health_endpoint(
    runtime: str, protocol: str, health: str
) -> None:
    r = resolved(for_runtime(runtime))
    assert (r.plan.protocol, r.plan.health_path) == (protocol, health)


def test_default_images_are_the_runtimes_public_images() -> None:
    images = {k: resolved(for_runtime(k)).plan.image for k in ("llamacpp", "kserve", "triton")}
    assert images == {
        "llamacpp": "ghcr.io/ggml-org/llama.cpp:server",
        "kserve": "kserve/sklearnserver:v0.14.1",
        "triton": "nvcr.io/nvidia/tritonserver:24.10-py3",
    }
    assert resolved(for_runtime("mlserver")).plan.image == "seldonio/mlserver:1.7.1"


def test_llamacpp_gets_model_slots_context_and_the_key_file() -> None:
    block = {"contextSize": 8192, "parallelSlots": 4, "extraArgs": ["--seed", "7"]}
    r = resolved(deployment(runtime={"llamacpp": block}))
    a = args_of(r)
    assert a["--model"] == r.layout.path and a["--alias"] == "chat"
    assert (a["--host"], a["--port"]) == ("0.0.0.0", "8080")
    assert (a["--ctx-size"], a["--parallel"], a["--n-gpu-layers"]) == ("8192", "4", "0")
    assert a["--api-key-file"] == "/etc/longrun/keys/api-keys"
    assert r.plan.args[-2:] == ("--seed", "7")
    assert r.plan.enforces_keys and not r.uses_auth_proxy
    mounts = server(r)["volumeMounts"]
    assert {"name": "api-keys", "mountPath": "/etc/longrun/keys", "readOnly": True} in mounts


def test_llamacpp_on_a_gpu_uses_the_cuda_image_and_offloads_every_layer() -> None:
    r = resolved(deployment(resources={"gpu": 1}))
    assert r.plan.image == ServingImages().llamacpp_cuda
    assert args_of(r)["--n-gpu-layers"] == "999"


def test_llamacpp_serves_embeddings_and_completions_by_task() -> None:
    model = {"source": "hf://org/embed/e.gguf", "format": "gguf", "task": "embeddings"}
    r = resolved(deployment(model=model))
    assert "--embedding" in r.plan.args and r.plan.protocol == "openai-embeddings"
    model["task"] = "completion"
    assert resolved(deployment(model=model)).plan.protocol == "openai-completions"


def test_llamacpp_without_auth_reads_no_keys() -> None:
    r = resolved(deployment(auth={"enabled": False}))
    assert "--api-key-file" not in r.plan.args
    assert all(m["name"] != "api-keys" for m in server(r)["volumeMounts"])


def test_kserve_loads_the_model_dir_and_turns_off_grpc_and_request_logs() -> None:
    r = resolved(for_runtime("kserve"))
    a = args_of(r)
    assert a["--model_name"] == "kserve"
    assert a["--model_dir"] + "/model.joblib" == r.layout.path
    assert (a["--enable_grpc"], a["--enable_latency_logging"]) == ("false", "false")
    xgboost = {"source": "s3://models/x/model.bst", "format": "xgboost"}
    xgb = resolved(for_runtime("kserve", model=xgboost, runtime={"kserve": {}}))
    assert xgb.plan.image == "kserve/xgbserver:v0.14.1"
    assert xgb.plan.health_path == "/v2/health/ready"  # protocol v2 is the default


def test_mlserver_is_configured_by_environment_and_bound_to_loopback_behind_the_sidecar() -> None:
    r = resolved(for_runtime("mlserver"))
    env = dict(r.plan.env)
    assert env["MLSERVER_HOST"] == "127.0.0.1"
    assert env["MLSERVER_MODEL_IMPLEMENTATION"] == "mlserver_xgboost.XGBoostModel"
    assert env["MLSERVER_MODEL_URI"].endswith("/model.json")  # xgboost reads by extension
    assert env["MLSERVER_PARALLEL_WORKERS"] == "0"
    assert r.plan.command[:2] == ("mlserver", "start")
    open_ = resolved(for_runtime("mlserver", auth={"enabled": False}))
    assert dict(open_.plan.env)["MLSERVER_HOST"] == "0.0.0.0"


def test_triton_grpc_binds_loopback_and_gets_the_onnx_file_in_a_repository() -> None:
    r = resolved(for_runtime("triton", servedName="resnet50"))
    a = args_of(r)
    assert a["--model-repository"] == r.layout.path and r.layout.path.endswith("/repository")
    assert r.layout.fetch_args[1] == f"{r.layout.path}/resnet50/1/model.onnx"
    assert (a["--http-address"], a["--grpc-address"], a["--allow-grpc"]) == ("127.0.0.1",) * 2 + (
        "true",
    )
    assert (r.plan.http_port, r.plan.grpc_port) == (8000, 8001)


def test_triton_http_keeps_grpc_off() -> None:
    r = resolved(for_runtime("triton", runtime={"triton": {}}))
    assert args_of(r)["--allow-grpc"] == "false"
    assert (r.plan.protocol, r.plan.grpc_port) == ("kserve-v2", None)


def test_generic_gets_the_model_path_and_its_own_command_line() -> None:
    r = resolved(for_runtime("generic"))
    env = dict(r.plan.env)
    assert env["MODEL_PATH"] == r.layout.path and r.layout.path.endswith("/chat.Q4_K_M.gguf")
    assert r.plan.args == ("--model", "$(MODEL_PATH)", "--port", "8000")
    assert r.plan.http_port == 8000


def test_generic_without_a_health_path_is_probed_on_its_port() -> None:
    obj = for_runtime("generic")
    del obj["spec"]["runtime"]["generic"]["healthPath"]
    probe = server(resolved(obj))["readinessProbe"]
    assert probe["tcpSocket"] == {"port": 8000}


@pytest.mark.parametrize("runtime", ["kserve", "mlserver", "triton", "generic"])
def test_sidecar_takes_the_public_ports_and_the_probes_pass_through_it(runtime: str) -> None:
    r = resolved(for_runtime(runtime))
    pod = builders.build_pod_template(r, SETTINGS, keys_version=None)["spec"]
    sidecar = next(c for c in pod["containers"] if c["name"] == names.AUTH_CONTAINER)
    assert sidecar["ports"][0] == {"name": "http", "containerPort": 9080, "protocol": "TCP"}
    own = [p["name"] for p in server(r)["ports"]]
    assert all(name.startswith("server-") for name in own)
    assert server(r)["readinessProbe"]["httpGet"]["port"] == 9080  # the sidecar's, by number
    mounts = {m["name"]: m for m in sidecar["volumeMounts"]}
    keys = next(v for v in pod["volumes"] if v["name"] == "api-keys")
    assert keys["secret"]["items"] == [{"key": names.NGINX_KEYS_KEY, "path": names.NGINX_KEYS_KEY}]
    assert mounts["api-keys"]["readOnly"] and mounts["auth-proxy-config"]["readOnly"]


def test_nginx_config_checks_bearer_keys_and_lets_only_the_health_path_through() -> None:
    r = resolved(for_runtime("kserve"))
    conf = auth.nginx_conf(r.plan)
    assert "include /etc/longrun/keys/nginx-keys.map;" in conf
    assert "map $http_authorization $longrun_key_ok" in conf
    assert 'location = "/v1/models/kserve" { proxy_pass http://127.0.0.1:8080; }' in conf
    assert 'proxy_set_header Authorization "";' in conf
    assert "listen 9080;" in conf and "return 401" in conf


def test_nginx_config_proxies_grpc_with_the_same_check() -> None:
    conf = auth.nginx_conf(resolved(for_runtime("triton")).plan)
    assert "listen 9081 http2;" in conf
    assert "grpc_pass grpc://127.0.0.1:8001;" in conf
