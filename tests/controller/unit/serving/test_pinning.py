"""A Model shared from another namespace is pinned: a deployment renders its pods from the Model
version it accepted, a later change waits (ModelCurrent False, a Warning event) until the
deployment's owner accepts it by editing the deployment, as runs do with shared configs. And
what a foreign Model may not do: name a claim of this namespace (pvc://), have its source quoted
here when it is invalid, or tell whether it exists when it does not allow this namespace.

Real: decide_deployment (and the reconciler's event rule) on plain dicts; `now` is passed in.
Faked: nothing.
"""

from __future__ import annotations

import copy
from typing import Any

from contracts.serving import ModelDeploymentStatus
from controller.core.serving.decide import Patch, ServingDecision
from controller.core.serving.status import normalize
from controller.reconcile.deployments import transition_events
from tests.controller.unit.serving.objects import (
    children_of,
    created,
    decide,
    deployment,
    model_object,
    recorded,
)

V1 = "hf://org/chat-GGUF/chat.Q4_K_M.gguf@main"
V2 = "hf://org/evil-GGUF/chat.Q4_K_M.gguf@main"
Obj = dict[str, Any]


def shared_model(generation: int = 1, *, uid: str = "model-uid", **spec: Any) -> Obj:
    model = model_object(namespace="shared", allowedNamespaces=["team"], **spec)
    model["metadata"].update(generation=generation, uid=uid)
    return model


def consumer(**ref: Any) -> Obj:
    return deployment(model=None, modelRef={"name": "chat-model", "namespace": "shared", **ref})


def condition(status: ModelDeploymentStatus, type_: str) -> tuple[str, str, str] | None:
    found = [c for c in status.conditions if c.type == type_]
    return (found[0].status, found[0].reason, found[0].message) if found else None


def fetched(body: Obj) -> str:
    """The source the pods' download init container fetches."""
    return str(body["spec"]["template"]["spec"]["initContainers"][0]["args"][0])


def template_patch(decision: ServingDecision) -> Obj | None:
    """The Deployment's pod template a decision writes, if it writes one."""
    for write in decision.writes:
        if isinstance(write, Patch) and write.kind == "Deployment" and isinstance(write.body, list):
            for op in write.body:
                if op["path"] == "/spec/template":
                    return {"spec": {"template": op["value"]}}
    return None


def accepted_at_first(obj: Obj) -> tuple[Obj, Any]:
    """The consumer after its first pass on the shared Model (its status recorded), and the
    children that pass made."""
    first = decide(obj, model=shared_model())
    assert fetched(created(first)["Deployment"]) == V1
    return recorded(obj, first), children_of(first)


def test_a_shared_model_is_accepted_as_it_is_when_the_deployment_first_uses_it() -> None:
    decision = decide(consumer(), model=shared_model())
    accepted = decision.status.accepted_model
    assert accepted is not None and (accepted.uid, accepted.generation) == ("model-uid", 1)
    assert accepted.spec == {"source": V1, "format": "gguf"}  # the other tenants left out
    assert condition(decision.status, "ModelCurrent") == ("True", "Accepted", "")


def test_a_change_of_a_shared_model_waits_for_the_owner_and_nothing_rolls() -> None:
    obj, children = accepted_at_first(consumer())
    changed = shared_model(2, source=V2)
    decision = decide(obj, model=changed, children=children)
    assert template_patch(decision) is None and decision.writes == ()
    status = decision.status
    assert status.accepted_model is not None and status.accepted_model.generation == 1
    assert condition(status, "ModelCurrent") == (
        "False",
        "ModelChangeNotAccepted",
        'Model "shared/chat-model" changed since this deployment accepted it (generation 1, now '
        "generation 2); this deployment keeps serving what it accepted. Review the change, then "
        "set spec.modelRef.generation: 2 on this deployment",
    )
    assert status.phase != "Failed"  # it goes on serving what it accepted
    events = transition_events(normalize(obj["status"]), normalize(status))
    assert ("Warning", "ModelChangeNotAccepted") in [(t, r) for t, r, _ in events]


def test_an_edit_of_the_deployment_that_names_the_new_generation_accepts_it() -> None:
    obj, children = accepted_at_first(consumer())
    obj["spec"]["modelRef"]["generation"] = 2
    obj["metadata"]["generation"] = 2
    decision = decide(obj, model=shared_model(2, source=V2), children=children)
    template = template_patch(decision)
    assert template is not None and fetched(template) == V2
    assert decision.status.accepted_model is not None
    assert decision.status.accepted_model.generation == 2
    assert condition(decision.status, "ModelCurrent") == ("True", "Accepted", "")


def test_naming_a_generation_in_advance_does_not_accept_it() -> None:
    obj, children = accepted_at_first(consumer())
    obj["spec"]["modelRef"]["generation"] = 2  # the Model is still at 1
    obj["metadata"]["generation"] = 2
    settled = decide(obj, model=shared_model(), children=children)
    obj = recorded(obj, settled)
    decision = decide(obj, model=shared_model(2, source=V2), children=children)
    assert template_patch(decision) is None
    assert (condition(decision.status, "ModelCurrent") or ("",))[0] == "False"


def test_the_deployments_own_changes_roll_with_the_model_it_accepted() -> None:
    obj, children = accepted_at_first(consumer())
    obj["spec"]["startupTimeoutSeconds"] = 600  # the owner's own edit, not an acceptance
    obj["metadata"]["generation"] = 2
    decision = decide(obj, model=shared_model(2, source=V2), children=children)
    template = template_patch(decision)
    assert template is not None and fetched(template) == V1


def test_a_model_deleted_and_created_again_is_a_change_too() -> None:
    obj, children = accepted_at_first(consumer())
    decision = decide(obj, model=shared_model(1, uid="new-uid", source=V2), children=children)
    assert template_patch(decision) is None
    said = condition(decision.status, "ModelCurrent")
    assert said is not None and "generation 1 of a Model since deleted and created again" in said[2]


def test_a_deployment_that_names_another_generation_at_creation_starts_nothing() -> None:
    decision = decide(consumer(generation=3), model=shared_model(2, source=V2))
    assert decision.writes == () and decision.status.phase == "Failed"
    assert decision.status.message == (
        'spec.modelRef.generation: Model "shared/chat-model" is at generation 2, but '
        "spec.modelRef.generation says 3; set it to 2 to accept the Model as it is"
    )


def test_a_model_of_the_deployments_own_namespace_is_followed_unless_pinned_by_name() -> None:
    own = deployment(model=None, modelRef={"name": "chat-model"})
    first = decide(own, model=model_object())
    assert condition(first.status, "ModelCurrent") is None
    obj, children = recorded(own, first), children_of(first)
    changed = model_object(source=V2)
    changed["metadata"]["generation"] = 2
    followed = template_patch(decide(obj, model=changed, children=children))
    assert followed is not None and fetched(followed) == V1.replace("chat-GGUF", "evil-GGUF")
    pinned = copy.deepcopy(obj)
    pinned["spec"]["modelRef"]["generation"] = 1
    pinned["metadata"]["generation"] = 2
    pinned = recorded(pinned, decide(pinned, model=model_object(), children=children))
    waits = decide(pinned, model=changed, children=children)
    assert template_patch(waits) is None
    assert (condition(waits.status, "ModelCurrent") or ("",))[0] == "False"


def test_a_shared_model_that_became_invalid_does_not_stop_what_was_accepted() -> None:
    obj, children = accepted_at_first(consumer())
    broken = shared_model(2, source="ftp://somewhere/model.gguf")
    decision = decide(obj, model=broken, children=children)
    assert decision.status.phase != "Failed" and template_patch(decision) is None


def test_a_foreign_model_on_a_claim_is_refused_it_would_mount_one_of_ours() -> None:
    status = decide(consumer(), model=shared_model(source="pvc://data/chat.gguf")).status
    assert status.phase == "Failed"
    assert status.message == (
        'spec.modelRef.namespace: Model "shared/chat-model" reads a PersistentVolumeClaim '
        "(pvc://), and a deployment mounts claims of its own namespace only: it would name a "
        'claim of "team", not of the Model\'s namespace. Define the Model in namespace "team", '
        "or use a source that is downloaded (s3://, https://, hf://)"
    )
    own = deployment(model=None, modelRef={"name": "chat-model"})
    assert decide(own, model=model_object(source="pvc://data/chat.gguf")).status.phase != "Failed"


def test_an_invalid_foreign_model_is_reported_without_quoting_it() -> None:
    secret_source = "s3://x/" + "internal-bucket-name/" * 2
    for invalid in (
        shared_model(source=secret_source),  # a directory for a one-file format
        shared_model(source="gopher://internal-bucket-name/m.gguf"),
    ):
        status = decide(consumer(), model=invalid).status
        assert status.message is not None and "internal-bucket-name" not in status.message
        assert status.message.startswith(
            'spec.modelRef: Model "shared/chat-model" is invalid (spec.source'
        )
        assert "its owner sees why in the Model's status" in status.message
    # Nor when it does not allow this namespace: the answer is the one for a missing Model.
    not_ours = model_object(namespace="shared", source="gopher://internal-bucket-name/m.gguf")
    hidden = decide(consumer(), model=not_ours).status
    assert hidden.message == decide(consumer(), model=None).status.message
