"""Status from the Deployment and its pods: every phase, each failure cause named in the
message, the conditions with observedGeneration, and the serving fields runs read.

Real: decide_deployment and the status functions on Deployment and pod dicts shaped as the
API server and the kubelet report them. Faked: nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from contracts.serving import ModelDeploymentStatus, ModelStatus
from controller.core.serving.decide import ServingDecision
from controller.core.serving.status import model_status, normalize
from tests.controller.unit.serving.objects import (
    NOW,
    children_of,
    created,
    decide,
    deployment,
    deployment_status,
    for_runtime,
    model_object,
    pod,
    rolled_out,
)

RUNNING = {"running": {"startedAt": "2026-03-01T01:59:00Z"}}


def observe(
    obj: dict[str, Any] | None = None,
    *,
    ready: int | None = 0,
    dep_status: dict[str, Any] | None = None,
    pods: Sequence[dict[str, Any]] = (),
    **fields: Any,
) -> ServingDecision:
    """Decide again with the children a first decision made, the Deployment in a state."""
    obj = obj or deployment()
    made = created(decide(obj))["Deployment"]
    dep = (
        deployment_status(made, **dep_status)
        if dep_status is not None
        else rolled_out(made, ready or 0)
    )
    children = children_of(decide(obj), deployment=dep, pods=pods)
    return decide(obj, children=children, **fields)


def conditions(status: ModelDeploymentStatus | ModelStatus) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_a_new_deployment_is_pending_until_its_deployment_exists() -> None:
    status = decide(deployment()).status
    assert (status.phase, status.ready_text) == ("Pending", "0/1")
    assert conditions(status)["Progressing"] == ("True", "Creating")


def test_downloading_while_the_init_container_runs() -> None:
    status = observe(pods=[pod(fetch={"state": RUNNING})]).status
    assert status.phase == "Downloading"
    assert conditions(status)["ModelCached"] == ("False", "Downloading")


def test_deploying_while_the_model_loads() -> None:
    done = {"state": {"terminated": {"exitCode": 0}}}
    status = observe(
        pods=[pod(fetch=done, containers=[{"name": "server", "state": RUNNING}])]
    ).status
    assert status.phase == "Deploying"
    assert conditions(status)["ModelCached"] == ("True", "Cached")
    assert conditions(status)["Available"] == ("False", "Deploying")


def test_running_with_the_endpoint_protocol_model_and_key_secret() -> None:
    status = observe(ready=1).status
    assert (status.phase, status.ready_replicas, status.ready_text) == ("Running", 1, "1/1")
    assert status.endpoint == "http://chat.team.svc.cluster.local:8080"
    assert (status.protocol, status.model_name, status.runtime) == (
        "openai-chat",
        "chat",
        "llamacpp",
    )
    assert status.api_key_secret == "chat-api-keys"
    assert conditions(status) == {
        "ModelCached": ("True", "Cached"),
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("False", "RolloutComplete"),
    }
    assert {c.observed_generation for c in status.conditions} == {1}


def test_running_short_of_replicas_says_how_many_are_ready() -> None:
    status = observe(deployment(replicas=3), ready=2).status
    assert (status.phase, status.ready_text, status.message) == (
        "Running",
        "2/3",
        "2/3 replicas ready",
    )


def test_a_failed_download_names_the_exit_code_and_reason() -> None:
    fetch = {
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {
            "terminated": {"exitCode": 3, "message": "sha256 of model.gguf is 00ff…, want abcd…"}
        },
        "restartCount": 4,
    }
    status = observe(pods=[pod(fetch=fetch)]).status
    assert status.phase == "Failed"
    assert status.message == (
        "downloading the model failed (exit code 3: the downloaded file's sha256 does not match "
        "spec.sha256): sha256 of model.gguf is 00ff…, want abcd…"
    )
    assert conditions(status)["ModelCached"] == ("False", "DownloadFailed")
    assert conditions(status)["Progressing"] == ("False", "ModelDownloadFailed")


def test_an_image_that_cannot_be_pulled_is_named() -> None:
    waiting = {
        "reason": "ImagePullBackOff",
        "message": 'Back-off pulling image "ghcr.io/ggml-org/llama.cpp:nope"',
    }
    server = {
        "name": "server",
        "image": "ghcr.io/ggml-org/llama.cpp:nope",
        "state": {"waiting": waiting},
    }
    status = observe(pods=[pod(containers=[server])]).status
    assert (status.phase, conditions(status)["Available"]) == (
        "Failed",
        ("False", "ImagePullBackOff"),
    )
    assert status.message is not None
    image = "ghcr.io/ggml-org/llama.cpp:nope"
    assert status.message.startswith(f'cannot pull image "{image}" for container "server"')


def test_a_crash_loop_names_the_container_restarts_and_last_exit() -> None:
    server = {
        "name": "server",
        "restartCount": 6,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
    }
    status = observe(pods=[pod(containers=[server])]).status
    assert status.phase == "Failed"
    assert (
        status.message
        == 'container "server" is crash-looping (restarted 6 times; last exit code 137, OOMKilled)'
    )


def test_an_unschedulable_gpu_request_keeps_the_deployment_pending_and_says_why() -> None:
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    }
    status = observe(
        deployment(resources={"gpu": 1}), pods=[pod(conditions=[unschedulable])]
    ).status
    assert status.phase == "Pending"
    assert conditions(status)["Progressing"] == ("True", "InsufficientGPU")
    assert status.message == (
        "no node can take the pod's GPU request (nvidia.com/gpu); the scheduler says: "
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )


def test_other_unschedulable_pods_are_pending_with_the_scheduler_message() -> None:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes: taint",
    }
    status = observe(pods=[pod(conditions=[cond])]).status
    assert (status.phase, status.message) == (
        "Pending",
        "the pod cannot be scheduled: 0/1 nodes: taint",
    )


def test_progress_deadline_exceeded_fails_with_the_pod_cause() -> None:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "Insufficient nvidia.com/gpu",
    }
    progressing = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    dep_status = {"replicas": 1, "updatedReplicas": 1, "conditions": [progressing]}
    status = observe(dep_status=dep_status, pods=[pod(conditions=[cond])]).status
    assert status.phase == "Failed"
    assert conditions(status)["Progressing"] == ("False", "ProgressDeadlineExceeded")
    assert status.message is not None
    assert status.message.startswith(
        "the rollout made no progress before its deadline (ProgressDeadlineExceeded); no node"
    )


def test_an_update_rollout_is_updating_while_old_pods_serve() -> None:
    dep_status = {"replicas": 2, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}
    status = observe(dep_status=dep_status).status
    assert status.phase == "Updating"
    assert conditions(status)["Available"] == ("True", "MinimumReplicasAvailable")
    assert conditions(status)["Progressing"] == ("True", "Updating")


def test_a_spec_change_is_updating_before_the_deployment_controller_sees_it() -> None:
    obj = deployment()
    first = decide(obj)
    running = rolled_out(created(first)["Deployment"], 1)
    changed = deployment(runtime={"llamacpp": {"contextSize": 2048}})
    changed["metadata"]["generation"] = 2
    status = decide(changed, children=children_of(first, deployment=running)).status
    assert (status.phase, status.observed_generation) == ("Updating", 2)


def test_a_failing_update_stays_updating_while_old_pods_serve_and_names_the_cause() -> None:
    dep_status = {"replicas": 2, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}
    server = {
        "name": "server",
        "image": "x:2",
        "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}},
    }
    status = observe(dep_status=dep_status, pods=[pod(containers=[server])]).status
    assert status.phase == "Updating"
    assert (
        status.message == 'cannot pull image "x:2" for container "server" (ErrImagePull): not found'
    )


def test_an_idle_on_demand_deployment_is_idle() -> None:
    status = observe(deployment(idleReplicas=0), ready=0).status
    assert (status.phase, status.ready_text) == ("Idle", "0/0")
    assert conditions(status)["Available"] == ("False", "ScaledToZero")


def test_a_deployment_being_deleted_is_terminating_and_writes_nothing() -> None:
    obj = deployment()
    obj["metadata"]["deletionTimestamp"] = "2026-03-01T02:00:00Z"
    obj["status"] = observe(ready=1).status.to_wire()
    decision = decide(obj)
    assert decision.writes == () and decision.status.phase == "Terminating"
    assert decision.status.endpoint == "http://chat.team.svc.cluster.local:8080"


def test_a_missing_model_fails_with_the_reason_and_writes_nothing() -> None:
    decision = decide(deployment(model=None, modelRef={"name": "llama"}))
    assert decision.writes == () and decision.status.phase == "Failed"
    assert (
        decision.status.message
        == 'spec.modelRef: Model "team/llama" does not exist; create it and the deployment starts'
    )
    assert conditions(decision.status)["Available"] == ("False", "ModelNotFound")
    assert decision.status.runtime == "llamacpp"


def test_an_invalid_spec_fails_naming_the_field() -> None:
    decision = decide(deployment(replicas=-1))
    assert decision.status.message == "spec: replicas: Input should be greater than or equal to 0"


def test_a_referenced_model_gives_its_name() -> None:
    obj = deployment(model=None, modelRef={"name": "chat-model"})
    status = decide(obj, model=model_object()).status
    assert status.model_name == "chat-model"


def test_transition_times_move_only_when_a_condition_flips() -> None:
    first = observe(ready=1).status
    obj = deployment()
    obj["status"] = first.to_wire()
    again = observe(obj, ready=1, now=NOW + timedelta(minutes=5)).status
    assert normalize(again) == normalize(first)
    restarting = pod(fetch={"state": {"terminated": {"exitCode": 0}}})
    dropped = observe(obj, ready=0, pods=[restarting], now=NOW + timedelta(minutes=9)).status
    times = {c.type: c.last_transition_time for c in dropped.conditions}
    assert times["Available"] == NOW + timedelta(minutes=9)
    assert times["ModelCached"] == NOW


def test_an_ingress_gives_an_external_endpoint() -> None:
    obj = deployment(endpoint={"ingress": {"host": "llm.example.com"}})
    assert observe(obj, ready=1).status.external_endpoint == "http://llm.example.com/"
    assert observe(ready=1).status.external_endpoint is None


def test_a_grpc_deployment_reports_host_and_port() -> None:
    status = observe(for_runtime("triton"), ready=1).status
    assert (status.endpoint, status.protocol) == (
        "triton.team.svc.cluster.local:8081",
        "triton-grpc",
    )


def test_a_model_is_accepted_when_its_spec_is_usable() -> None:
    status = model_status(model_object(), now=NOW)
    assert conditions(status) == {"Accepted": ("True", "Accepted")}
    bad = model_status(model_object(source="http://h/m.gguf"), now=NOW)
    assert bad.conditions[0].message == (
        "source: an http:// source needs sha256 (plain HTTP is not authenticated); set sha256 "
        "or use https://"
    )
    assert bad.observed_generation == 1


def test_a_pod_that_cannot_get_its_secret_is_named_in_the_status() -> None:
    from controller.core.serving.pods import may_lack_secret, pod_issue

    waiting = {
        "name": "server",
        "state": {
            "waiting": {
                "reason": "CreateContainerConfigError",
                "message": 'secret "chat-api-keys" not found',
            }
        },
    }
    issue = pod_issue([pod(containers=[waiting])])
    assert issue is not None and issue.reason == "CreateContainerConfigError"
    assert issue.message == (
        'container "server" cannot start (CreateContainerConfigError): '
        'secret "chat-api-keys" not found'
    )
    assert may_lack_secret([pod(containers=[waiting])])
    running = {"name": "server", "state": {"running": {}}}
    assert not may_lack_secret([pod(containers=[running])])


def test_llamacpp_declares_its_parallel_slots_the_others_none() -> None:
    llama = observe(deployment(runtime={"llamacpp": {"parallelSlots": 4}}), ready=1).status
    assert (llama.slots_per_replica, llama.ready_replicas) == (4, 1)
    assert observe(for_runtime("kserve"), ready=1).status.slots_per_replica is None
