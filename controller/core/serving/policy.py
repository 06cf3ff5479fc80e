"""What a ModelDeployment may put into its pods: creating one must not be creating any Pod.

A deployment author chooses the model, the runtime and a few pod knobs, and the controller
makes the pod with its own rights. So, as for configs (controller/core/podpolicy.py):
- the server image is one the chart ships (any tag or digest of those repositories) unless
  ALLOWED_SERVING_IMAGES allows more;
- a custom command line (the `generic` runtime's `command` and `args`) runs whatever the
  image holds, `python -c …` included: only with SERVING_ALLOW_CUSTOM_COMMANDS;
- the environment may not set what the runtime, longrun or the auth wiring interprets (a
  `MLSERVER_HOST=0.0.0.0` would take the server out from behind the key check), names
  compared without regard to case (MLServer's pydantic-settings reads `mlserver_host` too);
- env `secretKeyRef` names only Secrets on ALLOWED_SERVING_ENV_SECRETS (none by default:
  the server is code longrun does not control), and never an API-key Secret;
- tolerations come from the same allow-list as runners';
- Ingress hosts, ClusterIssuers and Service types from their allow-lists (exposure.py).

Each refusal names the field and the setting. `static_problems` are the rules that need no
setting: `longrun validate` checks them too.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator

from contracts.serving import ModelDeploymentSpec
from contracts.serving.serverflags import VLLM, VLLM_REMOTE_CODE, FlagRules
from controller.core.podpolicy import is_reserved_env
from controller.core.serving import names
from controller.core.serving.auth import PROXY_GRPC_PORT, PROXY_HTTP_PORT, TOKEN_CHECK_PORT
from controller.core.serving.exposure import exposure_problems
from controller.core.serving.placement import placement_problems
from controller.core.serving.runtimes import RuntimePlan, ServingImages, needs_auth_proxy
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem

# Set by longrun for the runtimes (runtimes.py) or read by them to find the model and keys.
SERVING_ENV = frozenset(
    {
        "MODEL_PATH", "MODEL_NAME", "HOME", "HF_ENDPOINT",
        "LLAMA_API_KEY", "LLAMA_ARG_API_KEY_FILE", "LLAMA_ARG_HOST", "LLAMA_ARG_PORT",
        "LLAMA_ARG_MODEL", "LLAMA_ARG_ALIAS",
        # vLLM: what longrun sets (offline, no usage statistics), what its flag rules refuse
        # (contracts/serving/serverflags.py), and what opens endpoints or sources of its own
        # (dev-mode endpoints, LoRA adapters loaded at run time, ModelScope downloads).
        "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
        "VLLM_USAGE_STATS_SERVER", "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING",
        "VLLM_USE_MODELSCOPE", "VLLM_PLUGINS", *VLLM.all_env(),
    }
)  # fmt: skip
# MLServer's settings; llama-server's flags as variables (LLAMA_ARG_API_KEY would add a key
# that no rotation removes): set them through the runtime's fields or extraArgs.
# --trust-remote-code in any spelling vLLM's parser reads (`--trust_remote_code`, `--trust-rem`).
REMOTE_CODE = FlagRules("vLLM", (VLLM_REMOTE_CODE,), abbreviations=True, dotted=True)
SERVING_ENV_PREFIXES = ("MLSERVER_", "LLAMA_ARG_")
KEY_SECRET_SUFFIX = names.api_key_secret_name("x").removeprefix("x")
# A deployment name too long for the suffix gets a cut name ending in a hash (names.fit).
_CUT_NAME = re.compile(r"-[0-9a-f]{8}$")
_CUT_LENGTH = names.NAME_MAX - len(KEY_SECRET_SUFFIX) - 9


def deployment_problems(
    spec: ModelDeploymentSpec, plan: RuntimePlan, settings: ServingSettings, *, namespace: str
) -> list[Problem]:
    """Every knob of `spec` the controller's policy refuses, in field order."""
    return [
        *image_problems(spec, plan, settings),
        *command_problems(spec, settings),
        *env_problems(spec),
        *secret_problems(spec),
        *env_secret_problems(spec, settings.allowed_env_secrets),
        *toleration_problems(spec, settings.pod_policy.toleration_keys),
        *port_problems(spec),
        *exposure_problems(spec, settings, namespace=namespace),
        *placement_problems(spec, settings),
    ]


def static_problems(spec: ModelDeploymentSpec) -> list[Problem]:
    """The rules no setting changes (what `longrun validate` can check without a cluster)."""
    return [*env_problems(spec), *secret_problems(spec), *port_problems(spec)]


def image_repository(image: str) -> str:
    """`registry/path` of an image reference, without its tag or digest."""
    name = image.split("@", 1)[0]
    return name[: name.rfind(":")] if name.rfind(":") > name.rfind("/") else name


def shipped_patterns(images: ServingImages) -> tuple[str, ...]:
    """The shipped runtime images as globs: any tag or digest of their repositories."""
    repositories = sorted({image_repository(image) for image in images.defaults()})
    return tuple(f"{repo}{sep}*" for repo in repositories for sep in (":", "@"))


def image_problems(
    spec: ModelDeploymentSpec, plan: RuntimePlan, settings: ServingSettings
) -> Iterator[Problem]:
    """The server image, unless it is a shipped runtime image or allowed by a glob."""
    allowed = (*shipped_patterns(settings.images), *settings.allowed_images)
    if plan.image in settings.images.defaults() or any(
        fnmatch.fnmatchcase(plan.image, pattern) for pattern in allowed
    ):
        return
    listed = ", ".join(settings.allowed_images) or "empty"
    yield Problem(
        f"spec.runtime.{spec.runtime.kind}.image",
        "ImageNotAllowed",
        f'image "{plan.image}" is not allowed: the controller runs the runtime images it ships '
        "(any tag or digest of their repositories) and those matching ALLOWED_SERVING_IMAGES "
        f"(chart: serving.allowedImages), which is {listed}; use the runtime's default image "
        "or ask the cluster admin to allow it",
    )


def command_problems(spec: ModelDeploymentSpec, settings: ServingSettings) -> Iterator[Problem]:
    """A custom command line: it runs whatever the image holds (a shell, `python -c`); vLLM's
    --trust-remote-code runs the Python that comes with the model."""
    if settings.allow_custom_commands:
        return
    vllm = spec.runtime.vllm
    remote = vllm is not None and any(REMOTE_CODE.refused(a) for a in vllm.extra_args)
    if remote:
        yield Problem(
            "spec.runtime.vllm.extraArgs",
            "CommandNotAllowed",
            "--trust-remote-code runs the Python code that comes with the model in the server: "
            "the controller allows it only with SERVING_ALLOW_CUSTOM_COMMANDS=true (chart: "
            "serving.allowCustomCommands: true)",
        )
    generic = spec.runtime.generic
    if generic is None:
        return
    for field in ("command", "args"):
        if getattr(generic, field):
            yield Problem(
                f"spec.runtime.generic.{field}",
                "CommandNotAllowed",
                "a custom command line runs any program the image holds (a shell, python -c): "
                "the controller allows it only with SERVING_ALLOW_CUSTOM_COMMANDS=true (chart: "
                "serving.allowCustomCommands: true); without it a generic server runs its "
                "image's own entrypoint",
            )
            return


def env_problems(spec: ModelDeploymentSpec) -> Iterator[Problem]:
    """Environment variables the runtime, the auth wiring or longrun interprets, compared
    without regard to case."""
    for index, var in enumerate(spec.env):
        name, upper = var.name, var.name.upper()
        if is_reserved_env(name) or upper in SERVING_ENV or upper.startswith(SERVING_ENV_PREFIXES):
            yield Problem(
                f"spec.env[{index}].name",
                "EnvNotAllowed",
                f'environment variable "{name}" is set or interpreted by longrun or the runtime '
                "(model path, listen address, API keys, MLSERVER_*, LLAMA_ARG_*, loader and "
                "interpreter variables; in any letter case): use the deployment's own fields",
            )


def is_key_secret_name(name: str) -> bool:
    """True for a name longrun gives (or may give, cut) a deployment's API-key Secret."""
    return name.endswith(KEY_SECRET_SUFFIX) or (
        len(name) >= _CUT_LENGTH and _CUT_NAME.search(name) is not None
    )


def secret_problems(spec: ModelDeploymentSpec) -> Iterator[Problem]:
    """Secrets named like an API-key Secret: no key goes into an environment, and no
    certificate is written over one."""
    named = [
        (f"spec.env[{i}].secretKeyRef.name", var.secret_key_ref.name)
        for i, var in enumerate(spec.env)
        if var.secret_key_ref is not None
    ]
    tls = spec.endpoint.tls
    if tls is not None and tls.secret_name is not None:
        named.append(("spec.endpoint.tls.secretName", tls.secret_name))
    for field, name in named:
        if is_key_secret_name(name):
            yield Problem(
                field,
                "SecretNotAllowed",
                f'Secret "{name}" is named like the API-key Secret longrun makes for a '
                f"ModelDeployment (<name>{KEY_SECRET_SUFFIX}): no deployment may read or "
                "overwrite another's keys; name another Secret",
            )


def env_secret_problems(spec: ModelDeploymentSpec, allowed: tuple[str, ...]) -> Iterator[Problem]:
    """Env `secretKeyRef` Secrets off the allow-list (key Secrets: secret_problems)."""
    listed = ", ".join(allowed) if allowed else "empty"
    for index, var in enumerate(spec.env):
        ref = var.secret_key_ref
        if ref is None or is_key_secret_name(ref.name):
            continue
        if any(fnmatch.fnmatchcase(ref.name, pattern) for pattern in allowed):
            continue
        yield Problem(
            f"spec.env[{index}].secretKeyRef.name",
            "EnvSecretNotAllowed",
            f'Secret "{ref.name}" is not one model servers may read: the controller allows '
            "Secrets matching ALLOWED_SERVING_ENV_SECRETS (chart: serving.allowedEnvSecrets), "
            f"which is {listed}; a model server is code longrun does not control, and it can "
            "send what is in its environment wherever its egress allows",
        )


def toleration_problems(spec: ModelDeploymentSpec, allowed: tuple[str, ...]) -> Iterator[Problem]:
    """Tolerations whose taint key is not on the allow-list (as for configs)."""
    listed = ", ".join(allowed) if allowed else "empty"
    for index, toleration in enumerate(spec.tolerations):
        key = toleration.key or ""
        if (not key and "*" in allowed) or (
            key and any(fnmatch.fnmatchcase(key, pattern) for pattern in allowed)
        ):
            continue
        what = f'taint key "{key}"' if key else "every taint (no key)"
        yield Problem(
            f"spec.tolerations[{index}]",
            "TolerationNotAllowed",
            f"tolerating {what} is not allowed: the controller allows taint keys matching "
            f"ALLOWED_TOLERATIONS (chart: runner.allowedTolerations), which is {listed}",
        )


def port_problems(spec: ModelDeploymentSpec) -> Iterator[Problem]:
    """A generic server port that the auth sidecar needs for itself."""
    generic = spec.runtime.generic
    taken = (PROXY_HTTP_PORT, PROXY_GRPC_PORT) + ((TOKEN_CHECK_PORT,) if spec.auth.tokens else ())
    if generic is not None and needs_auth_proxy(spec) and generic.port in taken:
        yield Problem(
            "spec.runtime.generic.port",
            "PortConflict",
            f"port {generic.port} is the auth sidecar's; let the server listen on another",
        )
