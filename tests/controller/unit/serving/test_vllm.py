"""The vLLM runtime: its command line from the typed fields, the image by GPU count, the
sidecar that checks the keys, /dev/shm, the protocol by task, and the flags and environment
a deployment may not set.

Real: the contracts' validators, resolve_deployment, the runtime table, the builders and the
policy on plain dicts. Faked: nothing (the real server runs in tests/local and tests/e2e).
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.serving import ModelDeploymentSpec
from controller.core.serving import auth, builders
from controller.core.serving.policy import env_problems
from controller.core.serving.settings import ServingSettings
from tests.controller.unit.serving.objects import HF, decide, for_runtime, resolved
from tests.controller.unit.serving.test_decide import reason
from tests.controller.unit.serving.test_runtimes import args_of


def vllm(gpu: int = 0, task: str | None = None, **fields: Any) -> dict[str, Any]:
    model = {**HF, **({"task": task} if task else {})}
    spec: dict[str, Any] = {"model": model, "runtime": {"vllm": fields}}
    if gpu:
        spec["resources"] = {"gpu": gpu, "memory": "16Gi"}
    return for_runtime("vllm", **spec)


def test_typed_fields_become_vllm_serve_flags() -> None:
    r = resolved(
        vllm(
            gpu=2,
            maxModelLen=8192,
            gpuMemoryUtilization=0.85,
            dtype="bfloat16",
            quantization="awq",
            kvCacheDtype="fp8",
            enablePrefixCaching=False,
            maxNumSeqs=128,
            extraArgs=["--enable-chunked-prefill", "--seed", "7"],
        )
    )
    assert r.plan.command == ("vllm", "serve")
    assert r.plan.args[0] == r.layout.path  # the repository directory in the cache
    assert args_of(r) | {"--enable-chunked-prefill": ""} == {
        "--served-model-name": "vllm",
        "--host": "127.0.0.1",  # behind the sidecar
        "--port": "8080",
        "--disable-uvicorn-access-log": "",
        "--tensor-parallel-size": "2",
        "--max-model-len": "8192",
        "--gpu-memory-utilization": "0.85",
        "--dtype": "bfloat16",
        "--quantization": "awq",
        "--kv-cache-dtype": "fp8",
        "--max-num-seqs": "128",
        "--no-enable-prefix-caching": "",
        "--enable-chunked-prefill": "",
        "--seed": "7",
    }
    assert r.plan.args[-3:] == ("--enable-chunked-prefill", "--seed", "7")  # appended as given


def test_tensor_parallelism_defaults_to_the_pods_gpus_and_is_left_out_on_a_cpu() -> None:
    assert args_of(resolved(vllm(gpu=4)))["--tensor-parallel-size"] == "4"
    assert args_of(resolved(vllm(gpu=4, tensorParallelSize=2)))["--tensor-parallel-size"] == "2"
    assert "--tensor-parallel-size" not in args_of(resolved(vllm()))


def test_tensor_parallelism_above_the_pods_gpus_is_refused() -> None:
    with pytest.raises(
        ValidationError, match=r"tensorParallelSize: must not exceed resources\.gpu"
    ):
        ModelDeploymentSpec.model_validate(vllm(gpu=2, tensorParallelSize=4)["spec"])


def test_the_cuda_image_with_gpus_and_the_cpu_image_without() -> None:
    assert resolved(vllm(gpu=1)).plan.image == "vllm/vllm-openai:v0.32.0"
    assert resolved(vllm()).plan.image == "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0"
    settings = ServingSettings(allowed_images=("registry.internal/*",))
    own = resolved(vllm(gpu=1, image="registry.internal/vllm:1"), settings=settings)
    assert own.plan.image == "registry.internal/vllm:1"


@pytest.mark.parametrize(
    ("task", "protocol", "pooling"),
    [
        ("chat-completion", "openai-chat", False),
        ("completion", "openai-completions", False),
        ("embeddings", "openai-embeddings", True),
    ],
)
def test_the_task_chooses_the_protocol_runs_use_and_embeddings_get_the_pooling_runner(
    task: str, protocol: str, pooling: bool
) -> None:
    r = resolved(vllm(task=task))
    assert r.plan.protocol == protocol
    assert (args_of(r).get("--runner") == "pooling") is pooling


def test_the_sidecar_checks_the_keys_and_the_health_path_is_probed_through_it() -> None:
    # vLLM's own --api-key guards /v1, /v2, /inference and /cohere only: /pooling, /score,
    # /invocations... would answer without a key. So the sidecar checks every path.
    r = resolved(vllm())
    assert r.uses_auth_proxy and r.plan.key_file is None
    assert "--api-key" not in args_of(r)
    pod = builders.build_pod_template(r, ServingSettings(), keys_version="v1")["spec"]
    assert [c["name"] for c in pod["containers"]] == ["server", "auth-proxy"]
    probe = pod["containers"][0]["readinessProbe"]["httpGet"]
    assert probe == {"path": "/health", "port": auth.PROXY_HTTP_PORT}


def test_dev_shm_is_memory_backed_with_a_size_limit() -> None:
    r = resolved(vllm(gpu=1, shmSize="8Gi"))
    pod = builders.build_pod_template(r, ServingSettings(), keys_version=None)["spec"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm"
    default = resolved(vllm()).plan.shm_size
    assert default == "1Gi"


def test_the_server_downloads_nothing_and_reports_no_usage() -> None:
    env = dict(resolved(vllm()).plan.env)
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == env["DO_NOT_TRACK"] == "1"


def test_the_whole_repository_is_downloaded_into_one_cache_directory() -> None:
    model = {**HF, "exclude": ["*.bin", "original/"]}
    r = resolved(vllm() | {"spec": {**vllm()["spec"], "model": model}})
    dest = r.layout.fetch_args[1]
    assert r.layout.path == dest and r.plan.args[0] == dest
    assert r.layout.fetch_args[2:] == ("--exclude", "*.bin", "--exclude", "original/")
    plain = resolved(vllm())
    assert plain.layout.path != r.layout.path  # other files: another cache entry


@pytest.mark.parametrize(
    "arg",
    ["--api-key", "--api_key=x", "--api-k", "--served-model-name", "--host", "--port=1",
     "--model", "--tokenizer", "--download_dir", "--config", "--chat-template",
     "--speculative-config.model", "-sc", "--middleware", "--tool-server",
     "--allowed-local-media-path", "--max-model-len", "-q", "-qawq", "--tensor-parallel",
     "--runner", "--root-path", "--ssl-keyfile"],
)  # fmt: skip
def test_extra_args_may_not_set_what_longrun_sets_or_what_reaches_past_the_pod(arg: str) -> None:
    with pytest.raises(ValidationError, match="remove it from extraArgs"):
        ModelDeploymentSpec.model_validate(vllm(extraArgs=[arg, "x"])["spec"])


def test_trust_remote_code_needs_custom_commands() -> None:
    for spelling in ("--trust-remote-code", "--trust_remote_code", "--trust-remote"):
        refused = decide(vllm(extraArgs=[spelling]), settings=ServingSettings()).status
        assert reason(refused) == "CommandNotAllowed", spelling
        assert "SERVING_ALLOW_CUSTOM_COMMANDS" in (refused.message or "")
    allowed = ServingSettings(allow_custom_commands=True)
    assert decide(vllm(extraArgs=["--trust-remote-code"]), settings=allowed).writes


@pytest.mark.parametrize(
    "name",
    ["VLLM_API_KEY", "vllm_api_key", "HF_HUB_OFFLINE", "VLLM_SERVER_DEV_MODE",
     "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_USE_MODELSCOPE", "VLLM_HOST_IP", "DO_NOT_TRACK"],
)  # fmt: skip
def test_env_that_would_add_a_key_open_endpoints_or_downloads_is_refused(name: str) -> None:
    spec = ModelDeploymentSpec.model_validate(
        vllm()["spec"] | {"env": [{"name": name, "value": "1"}]}
    )
    assert [p.reason for p in env_problems(spec)] == ["EnvNotAllowed"]


def test_tuning_env_stays_allowed() -> None:
    env = [
        {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "4"},
        {"name": "VLLM_ATTENTION_BACKEND", "value": "FLASH_ATTN"},
    ]
    spec = ModelDeploymentSpec.model_validate(vllm()["spec"] | {"env": env})
    assert list(env_problems(spec)) == []


def test_max_num_seqs_is_the_slots_a_run_with_concurrency_auto_starts_from() -> None:
    status = decide(vllm(maxNumSeqs=48)).status
    assert status.slots_per_replica == 48
    assert decide(vllm()).status.slots_per_replica is None
