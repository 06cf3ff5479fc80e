"""The pure decision: create what is missing, patch only what drifted, delete what a spec
change no longer wants, leave alone what is not ours, and refuse what the policy refuses.

Real: decide_deployment on plain dicts (the children a first decision made, stored back
with UIDs, stand in for what the informers would hold). Faked: nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contracts.serving import ModelDeploymentStatus
from controller.core.podpolicy import PodPolicy
from controller.core.serving import names
from controller.core.serving.decide import Create, Delete, Patch
from controller.core.serving.settings import ServingSettings
from controller.core.validation import Problem
from tests.controller.unit.serving.objects import (
    NS,
    as_stored,
    children_of,
    created,
    decide,
    deployment,
    for_runtime,
    model_object,
    recorded,
    rolled_out,
)


def reason(status: ModelDeploymentStatus) -> str:
    """The Available condition's reason: the problem's, when there is one."""
    return next(c.reason for c in status.conditions if c.type == "Available")


def settled(obj: dict[str, Any], **overrides: Any) -> Any:
    """The children of `obj` as a first decision made them (Deployment rolled out), with
    that decision's status recorded on `obj`."""
    first = decide(obj)
    recorded(obj, first)
    dep = rolled_out(created(first)["Deployment"], 1)
    return children_of(first, **{"deployment": dep, **overrides})


def test_creates_every_child_in_order_with_the_secret_first() -> None:
    kinds = [w.kind for w in decide(for_runtime("kserve")).writes]
    assert kinds == ["Secret", "ConfigMap", "Deployment", "Service", "NetworkPolicy"]
    assert all(isinstance(w, Create) for w in decide(for_runtime("kserve")).writes)


@pytest.mark.parametrize("runtime", ["llamacpp", "kserve", "mlserver", "triton", "generic"])
def test_does_nothing_when_current(runtime: str) -> None:
    obj = for_runtime(
        runtime,
        cache={"storage": "pvc"},
        autoscaling={"maxReplicas": 2},
        endpoint={"ingress": {"host": "x.example.com"}, "tls": {"issuerRef": {"name": "ca"}}},
    )
    decision = decide(obj, children=settled(obj))
    assert decision.writes == () and decision.deletions == ()


def test_patches_only_what_drifted_in_the_pod_template() -> None:
    obj = deployment()
    children = settled(obj)
    changed = deployment(runtime={"llamacpp": {"contextSize": 2048}})
    changed["status"] = obj["status"]
    writes = decide(changed, children=children).writes
    assert [w.kind for w in writes] == ["Deployment"]
    patch = writes[0]
    assert isinstance(patch, Patch) and isinstance(patch.body, list)
    paths = [op["path"] for op in patch.body]
    assert paths == [
        "/spec/strategy",
        "/spec/progressDeadlineSeconds",
        "/spec/revisionHistoryLimit",
        "/spec/template",
        "/metadata/annotations/longrun.dev~1spec-hash",
    ]
    template = patch.body[3]["value"]
    assert "2048" in template["spec"]["containers"][0]["args"]


def test_a_service_patch_leaves_the_cluster_ip_alone() -> None:
    obj = deployment()
    children = settled(obj)
    writes = decide(deployment(endpoint={"port": 80}), children=children).writes
    service = next(w for w in writes if w.kind == "Service")
    assert isinstance(service, Patch) and isinstance(service.body, list)
    assert [op["path"] for op in service.body][:3] == [
        "/spec/type",
        "/spec/selector",
        "/spec/ports",
    ]


def test_a_changed_sidecar_config_is_patched_as_data() -> None:
    obj = for_runtime("kserve")
    children = settled(obj)
    stale = copy.deepcopy(children.config_map)
    stale["data"]["nginx.conf"] = "old"
    writes = decide(
        obj, children=children_of(decide(obj), deployment=children.deployment, config_map=stale)
    ).writes
    assert len(writes) == 1 and writes[0].kind == "ConfigMap"
    assert isinstance(writes[0], Patch) and set(writes[0].body) == {"data"}


def test_deletes_the_children_a_spec_change_no_longer_wants() -> None:
    full = for_runtime(
        "kserve",
        autoscaling={"maxReplicas": 3},
        endpoint={"ingress": {"host": "x.example.com"}, "tls": {"issuerRef": {"name": "ca"}}},
    )
    children = settled(full)
    bare = for_runtime("kserve", auth={"enabled": False})
    deleted = {d.kind for d in decide(bare, children=children).deletions}
    # The key Secret is not among them: the controller may not delete (or read) Secrets; it
    # goes with the deployment (owner reference).
    assert deleted == {
        "ConfigMap",
        "NetworkPolicy",
        "HorizontalPodAutoscaler",
        "Certificate",
        "Ingress",
    }


def test_a_deletion_names_the_uid_it_saw() -> None:
    children = settled(deployment(autoscaling={"maxReplicas": 3}))
    (delete,) = decide(deployment(), children=children).deletions
    assert delete == Delete("HorizontalPodAutoscaler", NS, "chat", "hpa-uid")


def test_refuses_a_child_it_does_not_own() -> None:
    obj = deployment()
    foreign = as_stored(created(decide(obj))["Service"])
    foreign["metadata"]["ownerReferences"] = [{"uid": "someone-else", "controller": True}]
    decision = decide(obj, children=children_of(decide(obj), service=foreign))
    assert not any(w.kind == "Service" for w in decision.writes)
    assert decision.status.phase == "Failed"
    assert decision.status.message == (
        'metadata.name: Service "chat" already exists and is not owned by this ModelDeployment; '
        "longrun leaves it alone: delete it or rename the ModelDeployment"
    )


def test_a_taken_secret_name_is_answered_with_a_patch_that_tests_the_owner() -> None:
    obj = deployment()
    decision = decide(obj, secret_answer="exists")
    (secret,) = [w for w in decision.writes if w.kind == "Secret"]
    assert isinstance(secret, Patch) and isinstance(secret.body, list)
    assert secret.body[0] == {
        "op": "test",
        "path": "/metadata/ownerReferences/0/uid",
        "value": "mdep-uid",
    }


def test_a_secret_that_is_not_ours_stops_the_plan() -> None:
    conflict = Problem(
        "metadata.name",
        "NameConflict",
        'Secret "chat-api-keys" already exists and is not owned by this ModelDeployment',
    )
    decision = decide(deployment(), answer=conflict)
    assert decision.writes == ()
    assert decision.status.message is not None
    assert 'Secret "chat-api-keys"' in decision.status.message


def test_adopts_a_retained_cache_claim_from_an_earlier_deployment_of_the_same_name() -> None:
    obj = deployment(cache={"storage": "pvc", "retainPolicy": "Retain"})
    children = settled(obj)
    assert "ownerReferences" not in children.claim["metadata"]
    assert decide(obj, children=children).writes == ()


def test_switching_retain_to_delete_gives_the_claim_an_owner() -> None:
    retained = settled(deployment(cache={"storage": "pvc", "retainPolicy": "Retain"}))
    writes = decide(deployment(cache={"storage": "pvc"}), children=retained).writes
    (patch,) = [w for w in writes if w.kind == "PersistentVolumeClaim"]
    assert isinstance(patch, Patch) and isinstance(patch.body, dict)
    assert patch.body["metadata"]["ownerReferences"][0]["kind"] == "ModelDeployment"


def test_a_retained_claim_is_never_deleted() -> None:
    retained = settled(deployment(cache={"storage": "pvc", "retainPolicy": "Retain"}))
    assert decide(deployment(), children=retained).deletions == ()


def test_an_api_server_refusal_is_reported_and_nothing_is_written() -> None:
    answer = Problem("spec", "Forbidden", "exceeded quota: gpu")
    decision = decide(deployment(), answer=answer)
    assert decision.writes == () and decision.status.phase == "Failed"
    assert decision.status.message == "spec: exceeded quota: gpu"


def test_a_model_in_another_namespace_needs_to_allow_ours() -> None:
    obj = deployment(model=None, modelRef={"name": "chat-model", "namespace": "shared"})
    refused = decide(obj, model=model_object(namespace="shared")).status
    assert refused.message == (
        'spec.modelRef: Model "shared/chat-model" does not exist, or does not list namespace '
        '"team" in spec.allowedNamespaces; the deployment starts when it does'
    )
    # Whether it exists or not is none of this namespace's business: the same answer.
    missing = decide(obj, model=None).status
    assert (missing.message, reason(missing)) == (refused.message, reason(refused))
    allowed = decide(obj, model=model_object(namespace="shared", allowedNamespaces=["team"]))
    assert allowed.status.phase == "Pending" and allowed.writes


def test_a_model_in_another_namespace_cannot_bring_its_credentials() -> None:
    obj = deployment(model=None, modelRef={"name": "chat-model", "namespace": "shared"})
    model = model_object(namespace="shared", allowedNamespaces=["team"], credentials={"name": "hf"})
    status = decide(obj, model=model).status
    assert reason(status) == "SecretInOtherNamespace"


def test_a_referenced_model_the_runtime_cannot_serve_is_refused() -> None:
    obj = deployment(model=None, modelRef={"name": "iris"}, runtime={"llamacpp": {}})
    model = model_object("iris", source="s3://models/iris/model.joblib", format="sklearn")
    status = decide(obj, model=model).status
    assert (
        status.message
        == 'spec.runtime: Model "iris": runtime llamacpp serves format gguf, not sklearn'
    )


def test_an_invalid_referenced_model_is_reported() -> None:
    obj = deployment(model=None, modelRef={"name": "chat-model"})
    status = decide(obj, model=model_object(format="pytorch")).status
    assert status.message is not None and status.message.startswith(
        'spec.modelRef: Model "team/chat-model": format:'
    )


def test_an_image_off_the_allow_list_is_refused_but_defaults_always_pass() -> None:
    settings = ServingSettings(allowed_images=("registry.internal/*",))
    refused = decide(for_runtime("generic"), settings=settings).status
    assert reason(refused) == "ImageNotAllowed"
    assert refused.message is not None and refused.message.startswith(
        'spec.runtime.generic.image: image "ghcr.io/huggingface/text-generation-inference:2.4.1"'
    )
    assert decide(deployment(), settings=settings).writes  # the default llama.cpp image


@pytest.mark.parametrize(
    "name", ["MLSERVER_HOST", "LLAMA_API_KEY", "LD_PRELOAD", "MODEL_PATH", "PYTHONPATH"]
)
def test_env_that_would_bypass_the_key_check_or_run_code_is_refused(name: str) -> None:
    status = decide(deployment(env=[{"name": name, "value": "x"}])).status
    assert reason(status) == "EnvNotAllowed"
    assert status.message is not None and status.message.startswith("spec.env[0].name:")


def test_tolerations_come_from_the_allow_list() -> None:
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    refused = decide(deployment(tolerations=[gpu])).status
    assert reason(refused) == "TolerationNotAllowed"
    settings = ServingSettings(pod_policy=PodPolicy(toleration_keys=("nvidia.com/*",)))
    assert decide(deployment(tolerations=[gpu]), settings=settings).status.phase == "Pending"


def test_a_generic_server_may_not_take_the_sidecar_port() -> None:
    obj = for_runtime("generic")
    obj["spec"]["runtime"]["generic"]["port"] = 9080
    assert reason(decide(obj).status) == "PortConflict"
    obj["spec"]["auth"] = {"enabled": False}
    assert decide(obj).writes


def test_the_deployment_annotations_name_it_on_every_child() -> None:
    for body in created(decide(for_runtime("kserve"))).values():
        assert body["metadata"]["annotations"][names.DEPLOYMENT_ANNOTATION] == "kserve"
