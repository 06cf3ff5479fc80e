"""What a ModelDeployment may put into its pods, under the same allow-lists as a config.

Creating a ModelDeployment must not be a way around the rules for InferenceConfigs:
the server image must be a default runtime image or on ALLOWED_SERVING_IMAGES, the
environment may not set what the runtime, longrun or the auth wiring interprets (a
`MLSERVER_HOST=0.0.0.0` would take the server out from behind the key check), and
tolerations come from the same allow-list. Each refusal names the field and the setting.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

from contracts.serving import ModelDeploymentSpec
from controller.core.podpolicy import is_reserved_env
from controller.core.serving.auth import PROXY_GRPC_PORT, PROXY_HTTP_PORT
from controller.core.serving.runtimes import RuntimePlan, needs_auth_proxy
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem

# Set by longrun for the runtimes (runtimes.py) or read by them to find the model and keys.
SERVING_ENV = frozenset(
    {
        "MODEL_PATH", "MODEL_NAME", "HOME", "HF_ENDPOINT",
        "LLAMA_API_KEY", "LLAMA_ARG_API_KEY_FILE", "LLAMA_ARG_HOST", "LLAMA_ARG_PORT",
        "LLAMA_ARG_MODEL", "LLAMA_ARG_ALIAS",
    }
)  # fmt: skip
SERVING_ENV_PREFIXES = ("MLSERVER_",)


def deployment_problems(
    spec: ModelDeploymentSpec, plan: RuntimePlan, settings: ServingSettings
) -> list[Problem]:
    """Every knob of `spec` the controller's policy refuses, in field order."""
    return [
        *image_problems(spec, plan, settings),
        *env_problems(spec),
        *toleration_problems(spec, settings.pod_policy.toleration_keys),
        *port_problems(spec),
    ]


def image_problems(
    spec: ModelDeploymentSpec, plan: RuntimePlan, settings: ServingSettings
) -> Iterator[Problem]:
    """The server image, unless it is a default runtime image or allowed by a glob (an empty
    allow-list allows any image, as ALLOWED_IMAGES does for runners)."""
    allowed = settings.allowed_images
    if not allowed or plan.image in settings.images.defaults():
        return
    if any(fnmatch.fnmatchcase(plan.image, pattern) for pattern in allowed):
        return
    listed = ", ".join(allowed)
    yield Problem(
        f"spec.runtime.{spec.runtime.kind}.image",
        "ImageNotAllowed",
        f'image "{plan.image}" is not allowed by the controller (ALLOWED_SERVING_IMAGES, chart: '
        f"serving.allowedImages: {listed}); use the runtime's default image or ask the "
        "operator to allow it",
    )


def env_problems(spec: ModelDeploymentSpec) -> Iterator[Problem]:
    """Environment variables the runtime, the auth wiring or longrun interprets."""
    for index, var in enumerate(spec.env):
        name = var.name
        if is_reserved_env(name) or name in SERVING_ENV or name.startswith(SERVING_ENV_PREFIXES):
            yield Problem(
                f"spec.env[{index}].name",
                "EnvNotAllowed",
                f'environment variable "{name}" is set or interpreted by longrun or the runtime '
                "(model path, listen address, API keys, loader and interpreter variables): use "
                "the deployment's own fields",
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
            f"ALLOWED_TOLERATIONS (chart: controller.allowedTolerations), which is {listed}",
        )


def port_problems(spec: ModelDeploymentSpec) -> Iterator[Problem]:
    """A generic server port that the auth sidecar needs for itself."""
    generic = spec.runtime.generic
    taken = (PROXY_HTTP_PORT, PROXY_GRPC_PORT)
    if generic is not None and needs_auth_proxy(spec) and generic.port in taken:
        yield Problem(
            "spec.runtime.generic.port",
            "PortConflict",
            f"port {generic.port} is the auth sidecar's; let the server listen on another",
        )
