"""Where a ModelDeployment's pods may run, and what they may ask of the scheduler. Pure.

Placement is power over other people's pods and nodes, so each knob has an allow-list
(globs, empty: none), as tolerations do:
- `priorityClassName`: a high class preempts other pods (ALLOWED_PRIORITY_CLASSES, the same
  list runs use: chart runner.allowedPriorityClasses);
- `runtimeClassName`: a RuntimeClass picks the container runtime (a GPU runtime, a sandbox,
  or one with weaker isolation) (ALLOWED_RUNTIME_CLASSES, chart serving.allowedRuntimeClasses);
- `affinity` and `topologySpreadConstraints`: the node label keys and topology keys they name
  (ALLOWED_AFFINITY_KEYS, chart serving.allowedAffinityKeys); pod terms see the deployment's
  own namespace only (the contract has no `namespaces` for them);
- `resources.gpuResource`: accelerators other than the controller's default
  (SERVING_GPU_RESOURCE) come from ALLOWED_SERVING_GPU_RESOURCES.

Each refusal names the field and the setting.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator

from contracts.serving import ModelDeploymentSpec, affinity_keys
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem


def placement_problems(spec: ModelDeploymentSpec, settings: ServingSettings) -> list[Problem]:
    """Every placement knob of `spec` the allow-lists refuse, in field order."""
    return [
        *_named(
            "spec.priorityClassName",
            spec.priority_class_name,
            settings.allowed_priority_classes,
            reason="PriorityClassNotAllowed",
            what="PriorityClass",
            setting="ALLOWED_PRIORITY_CLASSES (chart: runner.allowedPriorityClasses)",
        ),
        *_named(
            "spec.runtimeClassName",
            spec.runtime_class_name,
            settings.allowed_runtime_classes,
            reason="RuntimeClassNotAllowed",
            what="RuntimeClass",
            setting="ALLOWED_RUNTIME_CLASSES (chart: serving.allowedRuntimeClasses)",
        ),
        *_keys(spec, settings.allowed_affinity_keys),
        *_gpu_resource(spec, settings),
    ]


def gpu_resource(spec: ModelDeploymentSpec, settings: ServingSettings) -> str:
    """The extended resource the deployment's `resources.gpu` counts."""
    chosen = spec.resources.gpu_resource if spec.resources is not None else None
    return chosen or settings.gpu_resource


def _allowed(value: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)


def _listed(patterns: tuple[str, ...]) -> str:
    return ", ".join(patterns) if patterns else "empty"


def _named(
    field: str,
    value: str | None,
    allowed: tuple[str, ...],
    *,
    reason: str,
    what: str,
    setting: str,
) -> Iterator[Problem]:
    if value is None or _allowed(value, allowed):
        return
    yield Problem(
        field,
        reason,
        f'{what} "{value}" is not allowed: the controller allows those matching {setting}, '
        f"which is {_listed(allowed)}; ask the cluster admin to allow it",
    )


def _keys(spec: ModelDeploymentSpec, allowed: tuple[str, ...]) -> Iterator[Problem]:
    named = [(f"spec.affinity.{where}", key) for where, key in affinity_keys(spec.affinity)]
    named += [
        (f"spec.topologySpreadConstraints[{i}].topologyKey", c.topology_key)
        for i, c in enumerate(spec.topology_spread_constraints)
    ]
    for field, key in named:
        if not _allowed(key, allowed):
            yield Problem(
                field,
                "AffinityKeyNotAllowed",
                f'the label key "{key}" is not one deployments may place pods by: the '
                "controller allows keys matching ALLOWED_AFFINITY_KEYS (chart: "
                f"serving.allowedAffinityKeys), which is {_listed(allowed)}",
            )


def _gpu_resource(spec: ModelDeploymentSpec, settings: ServingSettings) -> Iterator[Problem]:
    chosen = spec.resources.gpu_resource if spec.resources is not None else None
    if chosen is None or chosen == settings.gpu_resource:
        return
    if not _allowed(chosen, settings.allowed_gpu_resources):
        yield Problem(
            "spec.resources.gpuResource",
            "GpuResourceNotAllowed",
            f'accelerator resource "{chosen}" is not allowed: the controller counts GPUs as '
            f"{settings.gpu_resource} (SERVING_GPU_RESOURCE, chart: serving.gpu.resourceName) "
            "and allows the resources matching ALLOWED_SERVING_GPU_RESOURCES (chart: "
            f"serving.gpu.allowedResources), which is {_listed(settings.allowed_gpu_resources)}",
        )
