"""Placement for GPUs: priority and runtime classes, affinity and topology spread under
allow-lists, the accelerator resource chosen by the chart and by the deployment, and a
deployment waiting for what no node has (status.waitingFor).

Real: the contracts, resolve/decide, the builders and the settings parser on plain dicts.
Faked: the pods' scheduler conditions (as kube-scheduler writes them; the real control plane
has no scheduler, tests/e2e binds pods through the node agent).
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from controller.core.settings import SettingsError
from tests.controller.unit.serving.objects import created, decide, deployment
from tests.controller.unit.serving.test_decide import reason
from tests.controller.unit.serving.test_status import observe
from tests.controller.unit.serving.test_vllm import vllm

ALLOWED = ServingSettings(
    allowed_priority_classes=("inference-*",),
    allowed_runtime_classes=("nvidia",),
    allowed_affinity_keys=("kubernetes.io/hostname", "topology.kubernetes.io/*", "nvidia.com/*"),
    allowed_gpu_resources=("amd.com/gpu",),
)
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
                    ]
                }
            ]
        }
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 50,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": "chat"}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    },
}
ZONE = "topology.kubernetes.io/zone"
SPREAD = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}


def pod_spec(obj: dict[str, Any], settings: ServingSettings = ALLOWED) -> dict[str, Any]:
    spec: dict[str, Any] = created(decide(obj, settings=settings))["Deployment"]["spec"]
    return dict(spec["template"]["spec"])


def test_placement_reaches_the_pod_and_a_spread_without_selector_spreads_its_own_pods() -> None:
    obj = deployment(
        priorityClassName="inference-high",
        runtimeClassName="nvidia",
        affinity=AFFINITY,
        topologySpreadConstraints=[SPREAD],
    )
    spec = pod_spec(obj)
    assert spec["priorityClassName"] == "inference-high"
    assert spec["runtimeClassName"] == "nvidia"
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["H100"]
    (spread,) = spec["topologySpreadConstraints"]
    labels = created(decide(obj, settings=ALLOWED))["Deployment"]["spec"]["selector"]
    assert spread["labelSelector"] == labels and spread["maxSkew"] == 1


@pytest.mark.parametrize(
    ("field", "value", "why", "setting"),
    [
        ("priorityClassName", "system-cluster-critical", "PriorityClassNotAllowed",
         "ALLOWED_PRIORITY_CLASSES (chart: runner.allowedPriorityClasses)"),
        ("runtimeClassName", "runc-privileged", "RuntimeClassNotAllowed",
         "ALLOWED_RUNTIME_CLASSES (chart: serving.allowedRuntimeClasses)"),
    ],
)  # fmt: skip
def test_a_class_off_the_allow_list_is_refused_naming_field_and_setting(
    field: str, value: str, why: str, setting: str
) -> None:
    status = decide(deployment(**{field: value}), settings=ALLOWED).status
    assert (status.phase, reason(status)) == ("Failed", why)
    assert status.message is not None
    assert status.message.startswith(f"spec.{field}: ")
    assert setting in status.message
    nothing = decide(deployment(**{field: value}), settings=ServingSettings()).status
    assert reason(nothing) == why  # the default allows none


def test_affinity_and_spread_keys_come_from_the_allow_list() -> None:
    host = {"labelSelector": {"matchLabels": {"a": "b"}}, "topologyKey": "node.example/rack"}
    near = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [host]}}
    refused = decide(deployment(affinity=near), settings=ALLOWED).status
    assert reason(refused) == "AffinityKeyNotAllowed"
    assert (refused.message or "").startswith(
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        '.topologyKey: the label key "node.example/rack" is not one'
    )
    spread = decide(deployment(topologySpreadConstraints=[SPREAD]), settings=ServingSettings())
    assert reason(spread.status) == "AffinityKeyNotAllowed"
    assert "ALLOWED_AFFINITY_KEYS (chart: serving.allowedAffinityKeys)" in (
        spread.status.message or ""
    )


def test_gpus_count_the_charts_accelerator_resource_or_an_allowed_one() -> None:
    nvidia = pod_spec(vllm(gpu=2))["containers"][0]["resources"]["limits"]
    assert nvidia["nvidia.com/gpu"] == 2
    amd_cluster = ServingSettings(gpu_resource="amd.com/gpu")
    limits = pod_spec(vllm(gpu=1), settings=amd_cluster)["containers"][0]["resources"]["limits"]
    assert "amd.com/gpu" in limits and "nvidia.com/gpu" not in limits
    chosen = vllm(gpu=1) | {"spec": {**vllm(gpu=1)["spec"]}}
    chosen["spec"]["resources"]["gpuResource"] = "amd.com/gpu"
    assert pod_spec(chosen)["containers"][0]["resources"]["limits"]["amd.com/gpu"] == 1
    chosen["spec"]["resources"]["gpuResource"] = "gpu.intel.com/i915"
    refused = decide(chosen, settings=ALLOWED).status
    assert reason(refused) == "GpuResourceNotAllowed"
    assert "serving.gpu.allowedResources" in (refused.message or "")


def test_the_accelerator_settings_are_read_and_checked() -> None:
    settings = serving_settings_from_env(
        {
            "SERVING_GPU_RESOURCE": "amd.com/gpu",
            "ALLOWED_SERVING_GPU_RESOURCES": "nvidia.com/gpu",
            "ALLOWED_PRIORITY_CLASSES": "batch-*,inference-*",
            "ALLOWED_RUNTIME_CLASSES": "nvidia",
            "ALLOWED_AFFINITY_KEYS": "topology.kubernetes.io/*",
        }
    )
    assert settings.gpu_resource == "amd.com/gpu"
    assert settings.allowed_priority_classes == ("batch-*", "inference-*")
    with pytest.raises(SettingsError, match="SERVING_GPU_RESOURCE='gpu' is not"):
        serving_settings_from_env({"SERVING_GPU_RESOURCE": "gpu"})


def unschedulable(message: str) -> dict[str, Any]:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }


def test_a_deployment_waiting_for_gpus_says_what_it_waits_for() -> None:
    from tests.controller.unit.serving.objects import pod

    said = "0/4 nodes are available: 2 Insufficient amd.com/gpu, 2 Insufficient memory."
    status = observe(vllm(gpu=1), pods=[pod(conditions=[unschedulable(said)])]).status
    assert status.phase == "Pending"
    assert status.waiting_for == "amd.com/gpu, memory"
    assert (status.message or "").startswith(
        "no node can take the pod's GPU request (amd.com/gpu); the scheduler says: 0/4 nodes"
    )
    other = observe(pods=[pod(conditions=[unschedulable("0/1 nodes: 1 untolerated taint")])])
    assert other.status.waiting_for == "a node that fits its placement"
    assert observe(ready=1).status.waiting_for is None
