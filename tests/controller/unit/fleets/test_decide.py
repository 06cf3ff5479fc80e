"""A namespace's fleet decided: Service, EndpointSlices, statuses and admin calls.

Real: controller.core.fleets.decide and everything under it, on plain dicts and health
values. Faked: nothing (no I/O in the core).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from controller.core.fleets.decide import AdminCall, FleetDecision, decide_fleet
from controller.core.fleets.health import HostHealth, OpState
from controller.core.fleets.observed import FleetChildren, FleetObserved
from controller.core.fleets.settings import FleetSettings
from controller.core.validation import Problem
from controller.core.writes import Create, Patch
from tests.controller.unit.fleets.objects import (
    NOW,
    NS,
    PROTOCOLS,
    Obj,
    assignment,
    done,
    failing,
    healthy,
    host,
    model,
)

SETTINGS = FleetSettings()


def observed(hosts: list[Obj], models: list[Obj], **parts: Any) -> FleetObserved:
    return FleetObserved(namespace=NS, hosts=hosts, models=models, protocols=PROTOCOLS, **parts)


def creates(decision: FleetDecision, kind: str) -> list[Obj]:
    return [w.body for w in decision.writes if isinstance(w, Create) and w.kind == kind]


def two_ready() -> FleetObserved:
    return observed(
        [host("a", address="10.0.0.1"), host("b", address="10.0.0.2")],
        [model("tiny")],
        health={"a": healthy("10.0.0.1", "tiny"), "b": healthy("10.0.0.2", "tiny")},
    )


def test_publishes_a_selectorless_service_and_a_slice_of_the_ready_hosts() -> None:
    decision = decide_fleet(two_ready(), SETTINGS, now=NOW)

    (service,) = creates(decision, "Service")
    assert service["metadata"]["name"] == "tiny" and "selector" not in service["spec"]
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 8080}
    ]
    (slice_,) = creates(decision, "EndpointSlice")
    assert slice_["metadata"]["name"] == "tiny-ipv4-8080"
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "tiny"
    assert slice_["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == (
        "fleets.longrun.dev"
    )
    assert slice_["addressType"] == "IPv4"
    entries = [
        (e["addresses"], e["conditions"]["ready"], e["targetRef"]["name"])
        for e in slice_["endpoints"]
    ]
    assert entries == [(["10.0.0.1"], True, "a"), (["10.0.0.2"], True, "b")]
    for child in (service, slice_):
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("InferenceModel", "tiny", "uid-tiny")
    status = decision.models["tiny"]
    assert (status.phase, status.replicas, status.ready_replicas) == ("Ready", 2, 2)
    assert status.endpoint == "http://tiny.fleet.svc.cluster.local:8080"
    assert [a.inference_model for a in decision.hosts["a"].assignments] == ["tiny"]
    assert decision.loads == () and decision.unloads == ()


def test_does_nothing_when_current() -> None:
    first = decide_fleet(two_ready(), SETTINGS, now=NOW)
    services = {"tiny": creates(first, "Service")[0]}
    slices = creates(first, "EndpointSlice")
    hosts = [{**h, "status": first.hosts[h["metadata"]["name"]].to_wire()}
             for h in two_ready().hosts]  # fmt: skip
    models = [{**model("tiny"), "status": first.models["tiny"].to_wire()}]
    again = replace(two_ready(), hosts=hosts, models=models,
                    children=FleetChildren(services=services, slices=slices))  # fmt: skip

    decision = decide_fleet(again, SETTINGS, now=NOW + timedelta(seconds=5))

    assert decision.writes == () and decision.deletions == ()
    assert decision.models["tiny"].to_wire() == first.models["tiny"].to_wire()
    assert decision.hosts["a"].to_wire() == first.hosts["a"].to_wire()


def test_a_replica_loading_is_in_the_slice_not_ready_and_its_host_is_asked_to_load() -> None:
    obs = observed(
        [host("a", address="10.0.0.1", protocol="ollama")],
        [model("tiny", replicas=1, model_name="qwen2.5:3b")],
        health={"a": healthy("10.0.0.1")},
    )
    decision = decide_fleet(obs, SETTINGS, now=NOW)

    (slice_,) = creates(decision, "EndpointSlice")
    assert slice_["endpoints"][0]["conditions"] == {
        "ready": False, "serving": False, "terminating": False,
    }  # fmt: skip
    assert decision.loads == (AdminCall("a", "qwen2.5:3b", None),)
    status = decision.models["tiny"]
    assert (status.phase, status.placements[0].state) == ("Loading", "Loading")


def test_a_loaded_model_is_ready_by_the_hosts_own_name_for_it() -> None:
    obs = observed(
        [host("a", address="10.0.0.1", protocol="ollama",
              assignments=[assignment("qwen2.5:3b")])],
        [model("tiny", replicas=1, model_name="qwen2.5:3b")],
        health={"a": healthy("10.0.0.1", "qwen2.5:3b")},
        ops={"a": {"qwen2.5:3b": done()}},
    )  # fmt: skip
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    assert decision.models["tiny"].ready_replicas == 1
    assert decision.loads == ()


def test_a_failed_load_shows_on_the_placement_and_is_asked_again() -> None:
    obs = observed(
        [host("a", address="10.0.0.1", protocol="ollama")],
        [model("tiny", replicas=1, model_name="nope")],
        health={"a": healthy("10.0.0.1")},
        ops={"a": {"nope": OpState("load", "failed", "POST /api/pull answered HTTP 500", at=NOW)}},
    )
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    placement = decision.models["tiny"].placements[0]
    assert (placement.state, placement.message) == (
        "Failed", "loading failed: POST /api/pull answered HTTP 500",
    )  # fmt: skip
    assert decision.loads == (AdminCall("a", "nope", None),)  # the prober backs off


def test_unloads_what_a_host_no_longer_serves_only_where_it_can_load() -> None:
    obs = observed(
        [host("a", address="10.0.0.1", protocol="ollama", assignments=[assignment("qwen", "gone")]),
         host("b", address="10.0.0.2", assignments=[assignment("tiny", "gone")])],
        [],
        health={"a": healthy("10.0.0.1", "qwen"), "b": healthy("10.0.0.2", "tiny")},
    )  # fmt: skip
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    assert decision.unloads == (AdminCall("a", "qwen"),)
    assert decision.hosts["a"].assignments == [] and decision.hosts["b"].assignments == []


def test_patches_a_drifted_slice_and_deletes_one_no_longer_wanted() -> None:
    first = decide_fleet(two_ready(), SETTINGS, now=NOW)
    drifted = creates(first, "EndpointSlice")[0]
    drifted = {**drifted, "endpoints": drifted["endpoints"][:1],
               "metadata": {**drifted["metadata"], "annotations": {}}}  # fmt: skip
    stale = {"metadata": {"name": "tiny-ipv4-9090", "uid": "uid-stale", "namespace": NS}}
    children = FleetChildren(
        services={"tiny": creates(first, "Service")[0]}, slices=[drifted, stale]
    )
    decision = decide_fleet(replace(two_ready(), children=children), SETTINGS, now=NOW)

    (patch,) = decision.writes
    assert isinstance(patch, Patch) and patch.name == "tiny-ipv4-8080"
    assert isinstance(patch.body, dict) and len(patch.body["endpoints"]) == 2
    assert [(d.name, d.uid) for d in decision.deletions] == [("tiny-ipv4-9090", "uid-stale")]


def test_a_service_name_taken_by_another_object_fails_the_model() -> None:
    theirs = {"metadata": {"name": "tiny", "namespace": NS, "ownerReferences": []}}
    obs = replace(two_ready(), children=FleetChildren(services={"tiny": theirs}))
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    status = decision.models["tiny"]
    assert status.phase == "Failed" and status.placements == []
    assert 'Service "tiny" already exists and is not owned by this InferenceModel' in (
        status.message or ""
    )
    assert decision.writes == ()


def test_a_model_ref_names_the_model_and_carries_its_source_to_the_load() -> None:
    ref = model("small", replicas=1)
    ref["spec"] = {**ref["spec"], "modelRef": {"name": "qwen-small"}}
    del ref["spec"]["model"]
    source = {"metadata": {"name": "qwen-small"}, "spec": {"source": "hf://Qwen/Q/q.gguf"}}
    obs = observed(
        [host("a", address="10.0.0.1", protocol="ollama")], [ref],
        health={"a": healthy("10.0.0.1")}, model_sources={"qwen-small": source},
    )  # fmt: skip
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    assert decision.loads == (AdminCall("a", "qwen-small", "hf://Qwen/Q/q.gguf"),)
    missing = decide_fleet(replace(obs, model_sources={}), SETTINGS, now=NOW).models["small"]
    assert missing.phase == "Failed"
    available = next(c for c in missing.conditions if c.type == "Progressing")
    assert (available.reason, available.status) == ("ModelNotFound", "False")


def ready_condition(decision: FleetDecision, name: str = "a") -> tuple[str, str, str]:
    (ready,) = decision.hosts[name].conditions
    return ready.status, ready.reason, ready.message


def test_a_refused_host_says_why_and_serves_nothing() -> None:
    why = "10.0.0.1 is refused: in 10.0.0.0/8, a network the controller setting DENIED_CIDRS denies"
    refused = HostHealth(checked=True, refused=why, refused_reason="AddressNotAllowed")
    obs = replace(two_ready(), health={**two_ready().health, "a": refused})
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    assert ready_condition(decision)[:2] == ("False", "AddressNotAllowed")
    assert decision.hosts["a"].ready is False and decision.hosts["a"].assignments == []
    assert [e["addresses"] for e in creates(decision, "EndpointSlice")[0]["endpoints"]] == [
        ["10.0.0.2"]
    ]


def test_a_hosts_conditions_say_pending_failing_and_credentials() -> None:
    problem = Problem("spec.credentials", "CredentialsNotAllowed", "no")
    obs = observed(
        [host("a"), host("b"), host("c")],
        [],
        health={"b": failing("10.0.0.2")},
        credential_problems={"c": problem},
    )
    decision = decide_fleet(obs, SETTINGS, now=NOW)
    assert ready_condition(decision, "a")[:2] == ("False", "Pending")
    assert ready_condition(decision, "b") == (
        "False", "HealthCheckFailed",
        "3 health checks failed in a row: GET /v1/models: connection refused",
    )  # fmt: skip
    assert ready_condition(decision, "c")[:2] == ("False", "CredentialsNotAllowed")
    assert decision.hosts["b"].last_error == "GET /v1/models: connection refused"


def test_last_seen_is_rewritten_at_most_once_a_minute() -> None:
    first = decide_fleet(two_ready(), SETTINGS, now=NOW)
    hosts = [
        {**h, "status": first.hosts[h["metadata"]["name"]].to_wire()} for h in two_ready().hosts
    ]
    later = {n: replace(h, last_seen=NOW + timedelta(seconds=s)) for (n, h), s in
             zip(two_ready().health.items(), (30, 61), strict=True)}  # fmt: skip
    decision = decide_fleet(replace(two_ready(), hosts=hosts, health=later), SETTINGS, now=NOW)
    assert decision.hosts["a"].last_seen == NOW
    assert decision.hosts["b"].last_seen == NOW + timedelta(seconds=61)
