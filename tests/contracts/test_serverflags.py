"""Flags a model server must not get from a deployment: matched as the server reads them.

Real: the pydantic models, `contracts.serving.serverflags`, the controller's env policy, and,
for the CRD's CEL rule, the API emulator's CEL evaluator (e2e/emulator/cel.py; the real
server's answers to the same rule are the fidelity goldens of testdata/invalid). Faked:
nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.serving import ModelDeploymentSpec
from contracts.serving.serverflags import LLAMA_CPP, FlagRules, RefusedOption
from e2e.emulator.cel import evaluate

# Each of these was accepted before issue 26: llama.cpp reads `_` as `-` in a `--` flag, and
# knows short names and environment variables.
BYPASSES = [
    "--api_key",
    "--api_key=static",
    "--api_key_file",
    "--model_url",
    "--hf_repo",
    "-hf",
    "-hfr",
    "-mu",
    "-m",
    "--host=0.0.0.0",
    "--ssl_key_file",
    "--rpc",
    "--path",
    "--slot_save_path",
    "--tools",
    "--mcp_servers_json",
    "-ag",
    "--gpt_oss_20b_default",
]
ALLOWED = ["--seed", "42", "--ctx_size", "-c", "4096", "--flash-attn", "on", "--jinja", "-ngl"]


def deployment(**spec: Any) -> dict[str, Any]:
    body = {"model": {"source": "hf://org/repo/m.gguf", "format": "gguf"}}
    return {**body, "runtime": {"llamacpp": {}}, **spec}


def refusal(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as err:
        ModelDeploymentSpec.model_validate(spec)
    return str(err.value.errors()[0]["msg"]).removeprefix("Value error, ")


@pytest.mark.parametrize("arg", BYPASSES)
def test_extra_args_are_refused_as_llama_cpp_reads_them(arg: str) -> None:
    message = refusal(deployment(runtime={"llamacpp": {"extraArgs": ["--seed", "1", arg]}}))
    assert message.startswith(f"'{arg.split('=')[0]}'") and "remove it from extraArgs" in message


def test_the_refusal_says_how_llama_cpp_reads_the_flag_and_why() -> None:
    assert LLAMA_CPP.arg_problem("--api_key", field="extraArgs") == (
        "'--api_key' (llama.cpp reads it as --api-key) is not allowed: API keys: longrun makes "
        "and rotates them; remove it from extraArgs"
    )
    assert LLAMA_CPP.arg_problem("-hf", field="extraArgs") == (
        "'-hf' (llama.cpp reads it as --hf-repo) is not allowed: model source: longrun "
        "downloads and checks the model; remove it from extraArgs"
    )


def test_tuning_flags_stay_allowed() -> None:
    ModelDeploymentSpec.model_validate(deployment(runtime={"llamacpp": {"extraArgs": ALLOWED}}))
    assert all(LLAMA_CPP.refused(arg) is None for arg in ALLOWED)


def test_only_double_dash_flags_have_underscores_read_as_dashes() -> None:
    assert LLAMA_CPP.normalise("--api_key=a_b") == "--api-key"
    assert LLAMA_CPP.normalise("-h_f") == "-h_f"  # llama.cpp matches short names as written


def test_every_variable_llama_cpp_reads_as_a_refused_flag_is_refused_in_env() -> None:
    # The controller's policy (controller/core/serving/policy.py) refuses them, in any case.
    from controller.core.serving.policy import env_problems

    names = LLAMA_CPP.all_env()
    assert {"LLAMA_API_KEY", "LLAMA_ARG_MODEL_URL", "LLAMA_ARG_STATIC_PATH"} <= set(names)
    for name in names:
        assert LLAMA_CPP.refused_env(name.lower()) is not None
        spec = ModelDeploymentSpec.model_validate(deployment(env=[{"name": name, "value": "x"}]))
        assert [p.reason for p in env_problems(spec)] == ["EnvNotAllowed"], name


def test_every_spelling_of_every_refused_option_is_refused_by_the_crd_rule_too() -> None:
    rule = LLAMA_CPP.cel_arg_rule()
    for name in LLAMA_CPP.all_names():
        underscored = "--" + name[2:].replace("-", "_") if name.startswith("--") else name
        for arg in (name, f"{name}=x", underscored):
            assert LLAMA_CPP.refused(arg) is not None, arg
            assert evaluate(rule, ["--seed", "1", arg]) is False, arg
    assert evaluate(rule, ALLOWED) is True


def test_a_server_that_takes_abbreviations_refuses_every_prefix_of_a_refused_flag() -> None:
    # vLLM's argparse reads an unambiguous prefix of a long flag as the flag (issue 29).
    rules = FlagRules("vLLM", (RefusedOption(("--api-key",), "API keys"),), abbreviations=True)
    assert rules.refused("--api-k=x") is not None and rules.refused("--api_ke") is not None
    assert rules.refused("--seed") is None and rules.refused("--a") is None
