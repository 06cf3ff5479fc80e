"""After a key rotation the old keys work until the rollout has replaced the pods that read them
at start; a rollout that stops (ProgressDeadlineExceeded) would keep them working for good. Then
the window is ended: the Deployment is switched to Recreate, which stops the old pods, says so
(OldKeysRevoked), and goes back to its own strategy once they are gone.

Real: decide_deployment (and the reconciler's event rule) on plain dicts. Faked: nothing; the
Deployment's status and the pods are written as kube-controller-manager and a kubelet would.
"""

from __future__ import annotations

import copy
from typing import Any

from contracts.serving import ROTATE_KEYS_ANNOTATION
from controller.core.serving import names
from controller.core.serving.decide import Patch, ServingDecision
from controller.core.serving.meta import with_spec_hash
from controller.core.serving.status import normalize
from controller.reconcile.deployments import transition_events
from tests.controller.unit.serving.objects import (
    NS,
    as_stored,
    children_of,
    created,
    decide,
    deployment,
    deployment_status,
    recorded,
)

Obj = dict[str, Any]
DEADLINE = {
    "type": "Progressing",
    "status": "False",
    "reason": "ProgressDeadlineExceeded",
    "message": 'ReplicaSet "chat-new" has timed out progressing.',
}
ROLLING = {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}
CRASHING = {"state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}}


def server_pod(name: str, version: str, *, ready: bool, deleting: bool = False) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": NS,
        "labels": names.labels("chat"),
        "annotations": {
            names.DEPLOYMENT_ANNOTATION: "chat",
            names.KEYS_VERSION_ANNOTATION: version,
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T01:59:00Z"
    container = {"name": "server", "ready": ready, "restartCount": 0 if ready else 7}
    if not ready:
        container.update(CRASHING)
    return {"metadata": meta, "status": {"phase": "Running", "containerStatuses": [container]}}


def rotated() -> tuple[Obj, str, str]:
    """A deployment whose keys were rotated once (status recorded): it, old and new version."""
    obj = deployment()
    recorded(obj, decide(obj))
    old = obj["status"]["apiKeys"]["version"]
    again = deployment(annotations={ROTATE_KEYS_ANNOTATION: "1"})
    again["status"] = obj["status"]
    recorded(again, decide(again, entropy=lambda n: b"\xbb" * n))
    return again, old, again["status"]["apiKeys"]["version"]


def after_rotation(
    progressing: Obj, *, strategy: Obj | None = None, old_deleting: bool = False
) -> tuple[Obj, Any]:
    """The rotated deployment and its children mid-rollout: the Deployment at the new keys'
    template with `progressing`, one old pod still serving the old keys, one new one crashing."""
    obj, old, new = rotated()
    made = decide(copy.deepcopy(obj))
    dep = copy.deepcopy(created(made)["Deployment"])
    if strategy is not None:  # as the controller wrote it, its spec hash with it
        dep["spec"]["strategy"] = strategy
        dep = with_spec_hash(dep, exclude=("replicas",))
    stored = deployment_status(
        as_stored(dep, "Deployment-uid"),
        replicas=2,
        updatedReplicas=1,
        readyReplicas=1,
        availableReplicas=1,
        conditions=[progressing],
    )
    pods = [
        server_pod("chat-old", old, ready=True, deleting=old_deleting),
        server_pod("chat-new", new, ready=False),
    ]
    return obj, children_of(made, deployment=stored, pods=pods)


def strategy_written(decision: ServingDecision) -> Obj | None:
    for write in decision.writes:
        if isinstance(write, Patch) and write.kind == "Deployment" and isinstance(write.body, list):
            for op in write.body:
                if op["path"] == "/spec/strategy":
                    return dict(op["value"])
    return None


def test_old_keys_keep_working_while_the_rollout_goes_on() -> None:
    obj, children = after_rotation(ROLLING)
    decision = decide(obj, children=children)
    assert strategy_written(decision) is None
    assert decision.status.phase == "Updating"


def test_a_stuck_rollout_after_a_rotation_stops_the_pods_with_the_old_keys() -> None:
    obj, children = after_rotation(DEADLINE)
    decision = decide(obj, children=children)
    assert strategy_written(decision) == {"type": "Recreate"}
    status = decision.status
    assert status.phase == "Failed"
    progressing = next(c for c in status.conditions if c.type == "Progressing")
    assert progressing.reason == "OldKeysRevoked"
    assert status.message is not None and status.message.startswith(
        "the rollout after new API keys made no progress before its deadline"
    )
    assert "the old keys no longer work" in status.message
    events = transition_events(normalize(obj["status"]), normalize(status))
    assert ("Warning", "OldKeysRevoked") in [(t, r) for t, r, _ in events]


def test_once_switched_it_stays_so_until_the_old_pods_are_gone_then_switches_back() -> None:
    recreate = {"type": "Recreate"}
    # The Deployment's controller has not seen the switch yet: no deadline reads as exceeded.
    obj, children = after_rotation(ROLLING, strategy=recreate)
    switched = decide(obj, children=children)
    assert strategy_written(switched) is None  # still Recreate
    progressing = next(c for c in switched.status.conditions if c.type == "Progressing")
    assert progressing.reason == "OldKeysRevoked"  # and still said
    obj, children = after_rotation(DEADLINE, strategy=recreate, old_deleting=True)
    back = strategy_written(decide(obj, children=children))
    assert back is not None and back["type"] == "RollingUpdate"


def test_a_stuck_rollout_without_old_keys_is_left_to_its_owner() -> None:
    obj = deployment()
    first = decide(obj)
    recorded(obj, first)
    dep = deployment_status(
        as_stored(created(first)["Deployment"], "Deployment-uid"),
        replicas=1,
        updatedReplicas=0,
        readyReplicas=0,
        conditions=[DEADLINE],
    )
    version = obj["status"]["apiKeys"]["version"]
    pods = [server_pod("chat-new", version, ready=False)]
    decision = decide(obj, children=children_of(first, deployment=dep, pods=pods))
    assert strategy_written(decision) is None
    assert next(c for c in decision.status.conditions if c.type == "Progressing").reason == (
        "ProgressDeadlineExceeded"
    )


def test_a_deployment_that_recreates_by_itself_is_left_alone() -> None:
    obj, children = after_rotation(DEADLINE)
    obj["spec"]["cache"] = {"storage": "pvc", "accessMode": "ReadWriteOncePod"}  # Recreate
    decision = decide(obj, children=children)
    assert next(c for c in decision.status.conditions if c.type == "Progressing").reason == (
        "ProgressDeadlineExceeded"
    )
