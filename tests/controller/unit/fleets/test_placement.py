"""Where replicas go: by free capacity, one per host, sticky, and moved when a host is lost.

Real: controller.core.fleets (hosts, placement) on plain dicts and health values. Faked:
nothing (no I/O in the core).
"""

from __future__ import annotations

from decimal import Decimal

from contracts.fleets import HostSelector
from controller.core.fleets.health import HostHealth
from controller.core.fleets.hosts import host_view
from controller.core.fleets.placement import ModelWant, Plan, place
from tests.controller.unit.fleets.objects import (
    NOW,
    PROTOCOLS,
    Obj,
    assignment,
    failing,
    healthy,
    host,
)

POOL = HostSelector(match_labels={"pool": "a"})


def want(
    replicas: int = 2, *, name: str = "tiny", memory: str | None = None, slots: int = 1
) -> ModelWant:
    size = Decimal(2**30) * int(memory.removesuffix("Gi")) if memory else None
    return ModelWant(name, "tiny", POOL, replicas, slots=slots, memory=size)


def plan(hosts: list[tuple[Obj, HostHealth | None]], *wants: ModelWant) -> Plan:
    views = [host_view(obj, health, protocols=PROTOCOLS) for obj, health in hosts]
    return place(views, list(wants), now=NOW)


def holders(result: Plan, name: str = "tiny") -> set[str]:
    return {
        h for h, items in result.assignments.items() for a in items if a.inference_model == name
    }


def test_spreads_replicas_one_per_host() -> None:
    result = plan(
        [(host("a"), healthy("10.0.0.1", "tiny")), (host("b"), healthy("10.0.0.2", "tiny"))],
        want(2),
    )
    assert holders(result) == {"a", "b"}
    assert result.shortfall == {}


def test_takes_the_host_with_the_most_free_capacity_first() -> None:
    busy = host("a", slots=2, assignments=[assignment("other", "other")])
    free = host("b", slots=2)
    result = plan(
        [(busy, healthy("10.0.0.1", "tiny", "other")), (free, healthy("10.0.0.2", "tiny"))],
        want(1),
        want(1, name="other"),
    )
    assert holders(result) == {"b"}
    assert holders(result, "other") == {"a"}


def test_a_replica_stays_where_it_is() -> None:
    placed = host("b", assignments=[assignment("tiny")])
    result = plan(
        [(host("a", slots=8), healthy("10.0.0.1", "tiny")), (placed, healthy("10.0.0.2", "tiny"))],
        want(1),
    )
    assert holders(result) == {"b"}
    assert result.released == ()


def test_a_lost_hosts_replica_moves_to_a_spare() -> None:
    lost = host("a", assignments=[assignment("tiny")])
    kept = host("b", assignments=[assignment("tiny")])
    result = plan(
        [(lost, failing("10.0.0.1")), (kept, healthy("10.0.0.2", "tiny")),
         (host("c"), healthy("10.0.0.3", "tiny"))],
        want(2),
    )  # fmt: skip
    assert holders(result) == {"b", "c"}
    assert result.shortfall == {}


def test_without_a_spare_the_model_keeps_one_replica_and_says_why() -> None:
    lost = host("a", assignments=[assignment("tiny")])
    kept = host("b", assignments=[assignment("tiny")])
    result = plan([(lost, failing("10.0.0.1")), (kept, healthy("10.0.0.2", "tiny"))], want(2))
    assert holders(result) == {"b"}
    assert result.shortfall["tiny"] == (
        "1 of 2 replicas placed: no other host can take one (a: not ready "
        "(GET /v1/models: connection refused))"
    )


def test_a_host_not_checked_yet_keeps_its_replica_but_takes_no_new_one() -> None:
    placed = host("a", assignments=[assignment("tiny")])
    result = plan([(placed, None), (host("b"), None)], want(2))
    assert holders(result) == {"a"}
    assert "b: not checked yet" in result.shortfall["tiny"]


def test_a_static_host_takes_only_the_models_it_serves() -> None:
    result = plan(
        [(host("a"), healthy("10.0.0.1", "other")),
         (host("b", protocol="ollama"), healthy("10.0.0.2"))],
        want(2),
    )  # fmt: skip
    assert holders(result) == {"b"}
    assert (
        'a: does not serve "tiny" and its admin protocol cannot load models'
        in (result.shortfall["tiny"])
    )


def test_memory_is_counted_where_a_host_declares_it() -> None:
    small = host("a", protocol="ollama", slots=None, memory="8Gi",
                 assignments=[assignment("other", "other") | {"memory": "6Gi"}])  # fmt: skip
    big = host("b", protocol="ollama", slots=None, memory="16Gi")
    result = plan(
        [(small, healthy("10.0.0.1")), (big, healthy("10.0.0.2"))],
        want(2, memory="4Gi"),
        want(1, name="other", memory="6Gi"),
    )
    assert holders(result) == {"b"}
    assert "a: no free capacity" in result.shortfall["tiny"]


def test_a_host_counting_memory_takes_no_replica_of_unknown_size() -> None:
    result = plan(
        [(host("a", protocol="ollama", slots=None, memory="8Gi"), healthy("10.0.0.1"))], want(1)
    )
    assert holders(result) == set()
    assert (
        "counts memory, and the InferenceModel sets no resources.memory" in result.shortfall["tiny"]
    )


def test_fewer_replicas_release_the_last_hosts_by_name() -> None:
    hosts = [(host(n, assignments=[assignment("tiny")]), healthy(f"10.0.0.{i}", "tiny"))
             for i, n in enumerate("abc", start=1)]  # fmt: skip
    result = plan(hosts, want(1))
    assert holders(result) == {"a"}
    assert result.released == (("b", "tiny"), ("c", "tiny"))


def test_a_deleted_models_assignments_are_released() -> None:
    result = plan(
        [(host("a", assignments=[assignment("tiny", "gone")]), healthy("10.0.0.1", "tiny"))]
    )
    assert result.assignments == {"a": ()}
    assert result.released == (("a", "tiny"),)


def test_an_unschedulable_host_keeps_its_replica_and_takes_no_new_one() -> None:
    cordoned = host("a", unschedulable=True, assignments=[assignment("tiny")])
    other = host("b", unschedulable=True)
    result = plan(
        [(cordoned, healthy("10.0.0.1", "tiny")), (other, healthy("10.0.0.2", "tiny"))], want(2)
    )
    assert holders(result) == {"a"}
    assert "b: unschedulable" in result.shortfall["tiny"]


def test_hosts_not_selected_are_never_used() -> None:
    result = plan([(host("a", labels={"pool": "b"}), healthy("10.0.0.1", "tiny"))], want(1))
    assert holders(result) == set()
    assert result.shortfall["tiny"].endswith("(a: not selected by hostSelector)")
