"""Runs through an InferenceModel: a config's deploymentRef with `kind: InferenceModel` takes
the endpoint, protocol and model name from its status, and waits while no replica is ready.

Real: contracts, controller.core.serving.uses, controller.core.fleets.uses and the run
decision (decide) on plain dicts. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

from controller.core.decide import decide
from controller.core.serving import uses
from controller.core.settings import Settings
from tests.controller.unit.serving.test_uses import NOW, config, contract_of, observed, run

READY = {
    "phase": "Degraded",
    "message": "1 of 2 replicas placed",
    "modelName": "qwen2.5:3b",
    "endpoint": "http://qwen.team.svc.cluster.local:11434",
    "protocol": "openai-chat",
    "replicas": 2,
    "readyReplicas": 1,
    "conditions": [{"type": "Available", "status": "True", "reason": "ReplicaReady"}],
}


def fleet(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "InferenceModel",
        "metadata": {"name": "qwen", "namespace": "team", "uid": "m-uid", "generation": 1},
        "spec": {"model": "qwen2.5:3b", "replicas": 2},
        "status": status,
    }


def test_the_target_of_a_config_carries_the_kind() -> None:
    target = uses.target_of(config(kind="InferenceModel"))
    assert target is not None and (target.kind, target.key) == ("InferenceModel", "team/qwen")
    plain = uses.target_of(config())
    assert plain is not None and plain.kind == "ModelDeployment"


def test_a_run_takes_url_protocol_and_name_from_an_available_inference_model() -> None:
    decision = decide(
        observed(run(), config(kind="InferenceModel"), fleet(READY)), Settings(), now=NOW
    )
    model = contract_of(decision)["model"]
    assert (model["url"], model["protocol"], model["name"]) == (
        READY["endpoint"], "openai-chat", "qwen2.5:3b",
    )  # fmt: skip
    assert "auth" not in model  # hosts take no key from longrun


def test_a_run_waits_for_an_inference_model_with_no_ready_replica() -> None:
    not_ready = [{"type": "Available", "status": "False", "reason": "NoReplicaReady"}]
    loading = {**READY, "phase": "Loading", "message": "gpu-1: the host is loading it"}
    loading |= {"readyReplicas": 0, "conditions": not_ready}
    decision = decide(
        observed(run(), config(kind="InferenceModel"), fleet(loading)), Settings(), now=NOW
    )
    assert decision.writes == () and decision.status.phase == "Pending"
    accepted = next(c for c in decision.status.conditions if c.type == "Accepted")
    assert accepted.reason == "DeploymentNotAvailable"
    assert 'waiting for InferenceModel "team/qwen" to become Available (Loading: gpu-1: ' in (
        accepted.message
    )


def test_a_missing_inference_model_is_named_as_one() -> None:
    decision = decide(observed(run(), config(kind="InferenceModel"), None), Settings(), now=NOW)
    accepted = next(c for c in decision.status.conditions if c.type == "Accepted")
    assert accepted.reason == "DeploymentNotFound"
    assert 'InferenceModel "team/qwen" does not exist' in accepted.message
