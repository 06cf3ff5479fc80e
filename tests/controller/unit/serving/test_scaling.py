"""On demand: a deployment with idleReplicas holds its pods only while runs use it, and goes
back to idleReplicas scaleDownDelaySeconds after the last one; with an HPA only the step to
and from zero is ours.

Real: decide_scale and decide_deployment on plain dicts; `now` is passed in. Faked: nothing.
"""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from contracts.serving import ModelDeploymentSpec
from controller.core.serving.decide import Patch, ServingDecision
from controller.core.serving.scaling import decide_scale
from tests.controller.unit.serving.objects import (
    NOW,
    children_of,
    created,
    decide,
    deployment,
    recorded,
    rolled_out,
)

ON_DEMAND = {"replicas": 2, "idleReplicas": 0, "scaleDownDelaySeconds": 600}


def on_demand(**spec: Any) -> dict[str, Any]:
    return deployment(**{**ON_DEMAND, **spec})


def running(obj: dict[str, Any], replicas: int, *, idle_since: str | None = None) -> Any:
    """Children with the Deployment at `replicas` (all ready); status idleSince if given."""
    first = decide(obj)
    recorded(obj, first)
    dep = copy.deepcopy(created(first)["Deployment"])
    dep["spec"]["replicas"] = replicas
    obj["status"] = {"apiKeys": obj["status"]["apiKeys"]}
    if idle_since is not None:
        obj["status"]["idleSince"] = idle_since
    return children_of(first, deployment=rolled_out(dep, replicas))


def replicas_patch(decision: ServingDecision) -> int | None:
    """The replica count a decision writes on the Deployment, if any."""
    for write in decision.writes:
        if isinstance(write, Patch) and write.kind == "Deployment" and isinstance(write.body, list):
            for op in write.body:
                if op["path"] == "/spec/replicas":
                    return int(op["value"])
    return None


def test_an_on_demand_deployment_starts_idle_when_no_run_uses_it() -> None:
    decision = decide(on_demand())
    assert created(decision)["Deployment"]["spec"]["replicas"] == 0
    assert decision.status.idle_since == NOW and decision.status.replicas == 0


def test_scales_up_to_replicas_while_a_run_uses_it() -> None:
    obj = on_demand()
    decision = decide(obj, children=running(obj, 0), active_runs=["team/nightly", "team/adhoc"])
    assert replicas_patch(decision) == 2
    assert decision.status.active_runs == ["team/adhoc", "team/nightly"]
    assert decision.status.idle_since is None
    assert decision.status.phase == "Deploying"


def test_runs_of_a_namespace_it_does_not_allow_scale_nothing_and_are_not_listed() -> None:
    obj = on_demand(allowedNamespaces=["team-c"])
    decision = decide(obj, children=running(obj, 0), active_runs=["tenant-a/hog"])
    assert replicas_patch(decision) is None  # stays at 0
    assert decision.status.active_runs == [] and decision.status.replicas == 0
    decision = decide(obj, children=running(obj, 0), active_runs=["tenant-a/hog", "team-c/ok"])
    assert replicas_patch(decision) == 2
    assert decision.status.active_runs == ["team-c/ok"]


def test_stays_up_for_the_delay_after_the_last_run_and_says_when_to_look_again() -> None:
    obj = on_demand()
    finished = NOW - timedelta(seconds=60)
    decision = decide(obj, children=running(obj, 2), last_run_finished=finished)
    assert replicas_patch(decision) is None
    assert decision.requeue_after == 540
    assert decision.status.idle_since == finished and decision.status.phase == "Running"


def test_the_delay_counts_from_idle_since_in_status_across_controller_restarts() -> None:
    obj = on_demand()
    children = running(obj, 2, idle_since="2026-03-01T01:55:00Z")
    decision = decide(obj, children=children)
    assert decision.requeue_after == 300 and replicas_patch(decision) is None


def test_scales_down_to_idle_replicas_once_the_delay_has_passed() -> None:
    obj = on_demand()
    children = running(obj, 2, idle_since="2026-03-01T01:49:59Z")
    decision = decide(obj, children=children)
    assert replicas_patch(decision) == 0
    assert decision.requeue_after is None


def test_a_run_during_the_delay_keeps_it_up_and_clears_idle_since() -> None:
    obj = on_demand()
    children = running(obj, 2, idle_since="2026-03-01T01:55:00Z")
    decision = decide(obj, children=children, active_runs=["team/late"])
    assert replicas_patch(decision) is None and decision.requeue_after is None
    assert decision.status.idle_since is None


def test_idle_replicas_above_zero_keep_a_warm_pod() -> None:
    obj = on_demand(idleReplicas=1)
    children = running(obj, 2, idle_since="2026-03-01T01:00:00Z")
    assert replicas_patch(decide(obj, children=children)) == 1


def test_without_idle_replicas_the_count_is_always_replicas() -> None:
    obj = deployment(replicas=2)
    more = deployment(replicas=3)
    children = running(obj, 2)
    more["status"] = obj["status"]
    decision = decide(more, children=children)
    assert replicas_patch(decision) == 3
    assert [op["path"] for op in decision.writes[0].body] == ["/spec/replicas"]  # type: ignore[union-attr]
    assert decision.status.idle_since is None


def test_with_autoscaling_the_hpa_owns_the_count_above_zero() -> None:
    obj = on_demand(autoscaling={"minReplicas": 2, "maxReplicas": 6})
    assert replicas_patch(decide(obj, children=running(obj, 5), active_runs=["team/r"])) is None
    assert replicas_patch(decide(obj, children=running(obj, 0), active_runs=["team/r"])) == 2
    late = running(obj, 5, idle_since="2026-03-01T00:00:00Z")
    assert replicas_patch(decide(obj, children=late)) == 0


def test_with_autoscaling_status_reports_the_hpa_count() -> None:
    obj = deployment(autoscaling={"minReplicas": 1, "maxReplicas": 6})
    decision = decide(obj, children=running(obj, 4))
    assert (decision.status.replicas, decision.status.ready_text) == (4, "4/4")


def spec(**fields: Any) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate(on_demand(**fields)["spec"])


def test_decide_scale_creates_at_the_idle_count_and_starts_the_clock() -> None:
    scale = decide_scale(
        spec(), current=None, active=False, idle_since=None, last_run_finished=None, now=NOW
    )
    assert (scale.replicas, scale.idle_since, scale.requeue_after) == (0, NOW, None)


def test_decide_scale_with_no_delay_scales_down_at_once() -> None:
    scale = decide_scale(
        spec(scaleDownDelaySeconds=0),
        current=2,
        active=False,
        idle_since=None,
        last_run_finished=None,
        now=NOW,
    )
    assert scale.replicas == 0
