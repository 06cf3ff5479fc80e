"""Flags a model server must not be given by a deployment's author, matched the way the
server itself reads its command line and its environment.

Why the reading matters (issue 26): llama.cpp's argument parser (common/arg.cpp) turns every
`_` of an argument that starts with `--` into `-` before looking it up, so `--api_key` is
`--api-key`; it knows most options by a short name too (`-hf` is `--hf-repo`), and reads
each option from an environment variable when the command line lacks it (`LLAMA_ARG_MODEL_URL`
is `--model-url`). A check that compares the text as written lets all three through, and a
static `--api_key` then outlives every key rotation. So `FlagRules` normalises an argument
as the server does, then matches it against every spelling of every refused option, and
knows their environment variables.

The same rules serve other servers: vLLM's parser (argparse) reads `_` as `-` too, splits
`--flag=value`, and takes an unambiguous prefix of a long flag (`--api-k`), which
`abbreviations=True` covers. What each server refuses is a table of `RefusedOption`s;
`LLAMA_CPP` is llama.cpp's, from its server's argument list (tools/server/README.md, which
llama.cpp generates from common/arg.cpp).

Kept in `contracts` because the pydantic validator and the CRD's CEL rule both need it
(`cel_arg_rule`). The environment variables are listed with each option: the controller's
policy refuses them in a deployment's `env` (every `LLAMA_ARG_*` and `LLAMA_API_KEY`, in any
letter case: controller/core/serving/policy.py), and a test holds the two together.
"""

from __future__ import annotations

from dataclasses import dataclass

# Why a deployment may not set an option: what longrun sets itself, or what would let the
# server reach past the pod (downloads, other hosts, arbitrary files, commands).
MODEL_SOURCE = "model source: longrun downloads and checks the model"
SERVED_NAME = "the served name: set spec.servedName"
API_KEYS = "API keys: longrun makes and rotates them"
ADDRESS = "listen address: longrun sets it, and the auth wiring depends on it"
TLS = "TLS: terminate it at the Ingress (spec.endpoint.tls)"
FILES = "files on the server: the model cache and the key files are mounted in the pod"
TOOLS = "tools that run commands or reach other hosts from the server"
RPC = "RPC: offloading to other hosts"


@dataclass(frozen=True)
class RefusedOption:
    """One option, by every name the server knows it by, and why it is refused."""

    names: tuple[str, ...]  # long (--x-y) and short (-x) spellings
    why: str
    env: tuple[str, ...] = ()  # environment variables the server reads it from


@dataclass(frozen=True)
class FlagRules:
    """What one server refuses, and how it reads its arguments."""

    server: str
    options: tuple[RefusedOption, ...]
    underscores: bool = True  # `--a_b` is read as `--a-b`
    abbreviations: bool = False  # argparse: an unambiguous prefix of a long flag
    env_prefix: str = ""  # the server also reads `<prefix><LONG_NAME>` (llama.cpp: LLAMA_ARG_)

    def normalise(self, arg: str) -> str:
        """The option name the server looks up for `arg` (its value after `=` left out)."""
        name = arg.split("=", 1)[0]
        if self.underscores and name.startswith("--"):
            name = name.replace("_", "-")
        return name

    def refused(self, arg: str) -> RefusedOption | None:
        """The refused option `arg` sets, or None."""
        name = self.normalise(arg)
        for option in self.options:
            if name in option.names or (self.abbreviations and _abbreviates(name, option)):
                return option
        return None

    def refused_env(self, name: str) -> RefusedOption | None:
        """The refused option the environment variable `name` sets, or None (letter case
        ignored: the rule must not depend on how a server looks variables up)."""
        upper = name.upper()
        return next((o for o in self.options if upper in self.env_names(o)), None)

    def env_names(self, option: RefusedOption) -> tuple[str, ...]:
        """The variables an option is read from: its own, and `<prefix><LONG_NAME>`."""
        derived = (
            self.env_prefix + n[2:].upper().replace("-", "_")
            for n in option.names
            if self.env_prefix and n.startswith("--")
        )
        return tuple(dict.fromkeys((*option.env, *derived)))

    def all_names(self) -> list[str]:
        """Every refused spelling, sorted."""
        return sorted({n for o in self.options for n in o.names})

    def all_env(self) -> list[str]:
        """Every refused environment variable, sorted."""
        return sorted({e for o in self.options for e in self.env_names(o)})

    def arg_problem(self, arg: str, *, field: str) -> str | None:
        """Why `arg` may not be given, in words naming `field`, or None."""
        option = self.refused(arg)
        if option is None:
            return None
        written = arg.split("=", 1)[0]
        read = (
            f" ({self.server} reads it as {option.names[0]})" if written != option.names[0] else ""
        )
        return f"{written!r}{read} is not allowed: {option.why}; remove it from {field}"

    def cel_arg_rule(self) -> str:
        """A CEL rule on a list of arguments, true when none is refused (`abbreviations`
        aside: CEL has no cheap prefix test over a list, so the validator alone checks them).

        It normalises as `normalise` does, then tests membership: cheaper for the API
        server's cost estimate than one regular expression over every spelling."""
        name = "a.split('=')[0]"
        if self.underscores:
            name = "(a.startsWith('--') ? a.replace('_', '-') : a).split('=')[0]"
        return f"self.all(a, !({name} in {_cel_list(self.all_names())}))"


def _abbreviates(name: str, option: RefusedOption) -> bool:
    """argparse's reading: `--api-k` is an (unambiguous) prefix of `--api-key`."""
    return (
        len(name) > 3
        and name.startswith("--")
        and any(n.startswith(name) for n in option.names if n.startswith("--"))
    )


def _cel_list(items: list[str]) -> str:
    return "[" + ", ".join(f"'{i}'" for i in items) + "]"


def _opt(*names: str, why: str, env: tuple[str, ...] = ()) -> RefusedOption:
    return RefusedOption(names, why, env)


# llama.cpp's server: what longrun sets (model, served name, keys, address), and what reaches
# past the pod. Every other option (sampling, context, batching, GPU layers...) is allowed.
LLAMA_CPP = FlagRules(
    server="llama.cpp",
    env_prefix="LLAMA_ARG_",
    options=(
        _opt("--model", "-m", why=MODEL_SOURCE),
        _opt("--model-url", "-mu", why=MODEL_SOURCE),
        _opt("--docker-repo", "-dr", why=MODEL_SOURCE),
        _opt("--hf-repo", "-hf", "-hfr", why=MODEL_SOURCE),
        _opt("--hf-file", "-hff", why=MODEL_SOURCE),
        _opt("--hf-token", "-hft", why=MODEL_SOURCE),
        _opt("--hf-repo-draft", "--spec-draft-hf", "-hfd", "-hfrd", why=MODEL_SOURCE,
             env=("LLAMA_ARG_SPEC_DRAFT_HF_REPO", "LLAMA_ARG_HFD_REPO")),
        _opt("--hf-file-draft", "-hffd", why=MODEL_SOURCE),
        _opt("--model-draft", "--spec-draft-model", "-md", why=MODEL_SOURCE,
             env=("LLAMA_ARG_SPEC_DRAFT_MODEL",)),
        _opt("--hf-repo-v", "-hfv", "-hfrv", why=MODEL_SOURCE),
        _opt("--hf-file-v", "-hffv", why=MODEL_SOURCE),
        _opt("--model-vocoder", "-mv", why=MODEL_SOURCE),
        _opt("--mmproj", "-mm", why=MODEL_SOURCE),
        _opt("--mmproj-url", "-mmu", why=MODEL_SOURCE),
        _opt("--lora", why=MODEL_SOURCE),
        _opt("--lora-scaled", why=MODEL_SOURCE),
        _opt("--control-vector", why=MODEL_SOURCE),
        _opt("--control-vector-scaled", why=MODEL_SOURCE),
        _opt("--models-dir", why=MODEL_SOURCE),
        _opt("--models-preset", why=MODEL_SOURCE),
        *(
            _opt(preset, why=MODEL_SOURCE)
            for preset in (
                "--embd-gemma-default", "--embd-bge-small-en-default",
                "--embd-e5-small-en-default", "--embd-gte-small-default",
                "--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-7b-default",
                "--fim-qwen-7b-spec", "--fim-qwen-14b-spec", "--fim-qwen-30b-default",
                "--gpt-oss-20b-default", "--gpt-oss-120b-default",
                "--vision-gemma-4b-default", "--vision-gemma-12b-default",
            )
        ),
        _opt("--alias", "-a", why=SERVED_NAME),
        _opt("--api-key", why=API_KEYS, env=("LLAMA_API_KEY",)),
        _opt("--api-key-file", why=API_KEYS),
        _opt("--host", why=ADDRESS),
        _opt("--port", why=ADDRESS),
        _opt("--reuse-port", why=ADDRESS),
        _opt("--api-prefix", why=ADDRESS),
        _opt("--ssl-key-file", why=TLS),
        _opt("--ssl-cert-file", why=TLS),
        _opt("--path", why=FILES, env=("LLAMA_ARG_STATIC_PATH",)),
        _opt("--slot-save-path", why=FILES),
        _opt("--log-file", why=FILES),
        _opt("--media-path", why=FILES),
        _opt("--log-prompts-dir", why=FILES),
        _opt("--chat-template-file", why=FILES),
        _opt("--grammar-file", why=FILES),
        _opt("--json-schema-file", "-jf", why=FILES),
        _opt("--ui-config-file", "--webui-config-file", why=FILES),
        _opt("--lookup-cache-static", "-lcs", why=FILES),
        _opt("--lookup-cache-dynamic", "-lcd", why=FILES),
        _opt("--prompt-cache", why=FILES),
        _opt("--file", "-f", why=FILES),
        _opt("--binary-file", "-bf", why=FILES),
        _opt("--video-ffmpeg-dir", why=FILES),
        _opt("--tools", why=TOOLS),
        _opt("--tools-runtime", why=TOOLS),
        _opt("--agent", "-ag", why=TOOLS),
        _opt("--mcp-servers-config", why=TOOLS),
        _opt("--mcp-servers-json", why=TOOLS),
        _opt("--ui-mcp-proxy", "--webui-mcp-proxy", why=TOOLS),
        _opt("--rpc", why=RPC),
    ),
)  # fmt: skip
