"""Watches: resuming from a resourceVersion, selectors, and 410 Gone for a forgotten one.

Real: both backends, watched over raw HTTP (the events exactly as sent). Faked: nothing.
Informers resume a watch from the last resourceVersion they saw and relist on 410;
the controller's caches are only as right as these rules.
"""

from __future__ import annotations

from typing import Any

from tests.fidelity.conftest import GROUP, VERSION, Cluster

ONE_SHOT = {"configRef": {"name": "iris"}}


def runs_path(kube: Cluster) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns"


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]


def _label(kube: Cluster, name: str, value: str) -> dict[str, Any]:
    patch = {"metadata": {"labels": {"team": value}}}
    return kube.custom.patch_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, kube.ns, "inferenceruns", name, patch
    )


def test_watch_from_a_resource_version_replays_what_happened_after_it(kube: Cluster) -> None:
    first = kube.create_run("a", ONE_SHOT)
    _label(kube, "a", "x")
    kube.create_run("b", ONE_SHOT)
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, kube.ns, "inferenceruns", "a")
    events = kube.watch(
        runs_path(kube), until=3, resourceVersion=first["metadata"]["resourceVersion"]
    )
    assert summary(events) == [("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_watch_without_a_resource_version_starts_with_the_current_objects(kube: Cluster) -> None:
    kube.create_run("a", ONE_SHOT)
    kube.create_run("b", ONE_SHOT)
    events = kube.watch(runs_path(kube), until=2)
    assert sorted(summary(events)) == [("ADDED", "a"), ("ADDED", "b")]


def test_objects_leaving_a_label_selector_are_seen_deleted(kube: Cluster) -> None:
    start = kube.create_run("a", ONE_SHOT, labels={"team": "x"})
    kube.create_run("b", ONE_SHOT, labels={"team": "y"})
    left = _label(kube, "a", "y")  # leaves team=x
    _label(kube, "b", "x")  # enters team=x
    events = kube.watch(
        runs_path(kube),
        until=2,
        resourceVersion=start["metadata"]["resourceVersion"],
        labelSelector="team=x",
    )
    assert summary(events) == [("DELETED", "a"), ("ADDED", "b")]
    gone = events[0]["object"]["metadata"]  # the state it was selected in, at the new version
    assert gone["labels"] == {"team": "x"}
    assert gone["resourceVersion"] == left["metadata"]["resourceVersion"]


def expired_resource_version(kube: Cluster) -> str:
    """A resourceVersion of InferenceRuns that the server no longer remembers.

    The real watch cache of a custom resource starts when its CRD is Established, after
    the API server's own bootstrap writes, so resourceVersion 1 predates it; the
    emulator's window is its last `history_size` events, so we push "1" out of it.
    See e2e/README.md, Known divergences: the two windows differ in size and kind.
    """
    if not kube.is_real:
        history = kube.handle.emulator.config.history_size  # type: ignore[attr-defined]
        kube.core.create_namespaced_config_map(kube.ns, {"metadata": {"name": "churn"}})
        for i in range(history + 1):
            kube.core.patch_namespaced_config_map("churn", kube.ns, {"data": {"i": str(i)}})
    return "1"


def test_watch_from_a_forgotten_resource_version_ends_with_410_expired(kube: Cluster) -> None:
    too_old = expired_resource_version(kube)
    events = kube.watch(runs_path(kube), until=2, resourceVersion=too_old)
    assert [e["type"] for e in events] == ["ERROR"]
    status = events[0]["object"]
    assert {k: status[k] for k in ("kind", "status", "reason", "code")} == {
        "kind": "Status",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }
    assert status["message"].startswith("too old resource version: 1 (")


def test_list_at_an_exact_past_resource_version(kube: Cluster) -> None:
    first = kube.create_run("a", ONE_SHOT)
    kube.create_run("b", ONE_SHOT)
    rv = first["metadata"]["resourceVersion"]
    answer = kube.raw(
        "GET", runs_path(kube), query={"resourceVersion": rv, "resourceVersionMatch": "Exact"}
    )
    if kube.is_real:  # served from etcd (or a watch-cache snapshot) until compaction
        assert answer.status == 200
        assert [i["metadata"]["name"] for i in answer.body["items"]] == ["a"]
        assert answer.body["metadata"]["resourceVersion"] == rv
    else:  # Known divergence: the emulator keeps no past states
        assert (answer.status, answer.body["reason"]) == (410, "Expired")
