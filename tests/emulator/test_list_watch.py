"""List and watch: selectors, pagination, resourceVersion semantics, bookmarks, 410 Gone.

Real: HTTP/1.1 chunked watch streams read by the official client's `Watch` and
`SharedInformer`. Faked: the history window is tiny (200 events) so expiry is
reachable in a test.
"""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from e2e.fixtures import eventually


def make(k8s, name: str, **labels: str) -> None:
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": name, "labels": labels}})


def names(k8s, **kw) -> list[str]:
    return [o.metadata.name for o in k8s.core.list_namespaced_config_map(k8s.ns, **kw).items]


@pytest.fixture
def labelled(k8s):
    make(k8s, "a", app="web", tier="front")
    make(k8s, "b", app="web", tier="back")
    make(k8s, "c", app="db")
    make(k8s, "d")
    return k8s


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("app in (db, web),tier", ["a", "b"]),
        ("tier notin (front)", ["b", "c", "d"]),
        ("app", ["a", "b", "c"]),
        ("!app", ["d"]),
        ("app=web,tier!=back", ["a"]),
    ],
)
def test_label_selectors_filter_lists(labelled, selector, expected):
    assert names(labelled, label_selector=selector) == expected


def test_malformed_label_selector_is_bad_request(labelled):
    with pytest.raises(ApiException) as err:
        names(labelled, label_selector="app in web")
    assert err.value.status == 400


def test_field_selectors_on_name_and_namespace(labelled):
    assert names(labelled, field_selector="metadata.name=b") == ["b"]
    assert names(labelled, field_selector="metadata.name!=b") == ["a", "c", "d"]
    everywhere = labelled.core.list_config_map_for_all_namespaces(
        field_selector=f"metadata.namespace={labelled.ns}"
    )
    assert len(everywhere.items) == 4


def test_unsupported_field_selector_is_bad_request(labelled):
    with pytest.raises(ApiException) as err:
        names(labelled, field_selector="data.x=1")
    assert err.value.status == 400 and "field label not supported" in err.value.body


def test_list_returns_resource_version_and_paginates(labelled):
    first = labelled.core.list_namespaced_config_map(labelled.ns, limit=3)
    assert first.metadata.resource_version and first.metadata._continue
    assert first.metadata.remaining_item_count == 1
    rest = labelled.core.list_namespaced_config_map(
        labelled.ns, limit=3, _continue=first.metadata._continue
    )
    assert [o.metadata.name for o in first.items + rest.items] == ["a", "b", "c", "d"]
    assert rest.metadata._continue is None


def test_watch_from_resource_version_sees_added_modified_deleted(k8s):
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    make(k8s, "x")
    k8s.core.patch_namespaced_config_map("x", k8s.ns, {"data": {"k": "v"}})
    k8s.core.delete_namespaced_config_map("x", k8s.ns)
    w = watch.Watch()
    events = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(
            k8s.core.list_namespaced_config_map, k8s.ns, resource_version=rv, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x")]


def test_watch_without_resource_version_starts_with_current_state(labelled):
    w = watch.Watch()
    seen = []
    for e in w.stream(labelled.core.list_namespaced_config_map, labelled.ns, timeout_seconds=1):
        seen.append((e["type"], e["object"].metadata.name))
        if len(seen) == 4:
            w.stop()
    assert seen == [("ADDED", n) for n in "abcd"]


def test_watch_with_label_selector_reports_objects_leaving_the_selection(k8s):
    make(k8s, "x", app="web")
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    k8s.core.patch_namespaced_config_map("x", k8s.ns, {"metadata": {"labels": {"app": "db"}}})
    k8s.core.patch_namespaced_config_map("x", k8s.ns, {"metadata": {"labels": {"app": "web"}}})
    w = watch.Watch()
    events = [
        e["type"]
        for e in w.stream(
            k8s.core.list_namespaced_config_map,
            k8s.ns,
            label_selector="app=web",
            resource_version=rv,
            timeout_seconds=1,
        )
    ]
    assert events == ["DELETED", "ADDED"]


def test_watch_times_out_after_timeout_seconds(k8s, kube_emulator):
    import time

    start = time.monotonic()
    list(watch.Watch().stream(k8s.core.list_namespaced_config_map, k8s.ns, timeout_seconds=1))
    assert 0.9 <= time.monotonic() - start < 3


def test_watch_sends_bookmarks_when_allowed(k8s):
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    w = watch.Watch()
    for e in w.stream(
        k8s.core.list_namespaced_config_map,
        k8s.ns,
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=2,
    ):
        if e["type"] == "BOOKMARK":
            assert int(e["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)
            w.stop()
            break
    else:
        pytest.fail("no BOOKMARK event")


def churn(k8s, n: int) -> None:
    make(k8s, "churn")
    for i in range(n):
        k8s.emu.emulator.api.patch(
            k8s.emu.emulator.registry.get("", "v1", "configmaps"),
            k8s.ns,
            "churn",
            {"data": {"i": str(i)}},
            content_type="application/merge-patch+json",
        )


def test_watch_from_expired_rv_returns_gone(k8s):
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    churn(k8s, 250)  # history window is 200 events
    api = k8s.emu.api_client()
    resp = api.call_api(
        "GET",
        f"{k8s.emu.url}/api/v1/namespaces/{k8s.ns}/configmaps?watch=true&resourceVersion={rv}",
    )
    lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    assert resp.status == 200
    assert lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["code"] == 410 and lines[0]["object"]["reason"] == "Expired"


def test_python_watch_raises_gone_for_expired_rv(k8s):
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    churn(k8s, 250)
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                k8s.core.list_namespaced_config_map, k8s.ns, resource_version=rv, timeout_seconds=1
            )
        )
    assert err.value.status == 410


def test_list_with_exact_expired_resource_version_is_gone(k8s):
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    churn(k8s, 250)
    with pytest.raises(ApiException) as err:
        k8s.core.list_namespaced_config_map(
            k8s.ns, resource_version=rv, resource_version_match="Exact"
        )
    assert err.value.status == 410


def test_shared_informer_relists_after_gone(k8s):
    from kubernetes.informer import SharedInformer

    informer = SharedInformer(k8s.core.list_namespaced_config_map, namespace=k8s.ns)
    errors: list = []
    informer.add_event_handler("ERROR", errors.append)
    informer.start()
    try:
        make(k8s, "first")
        eventually(lambda: informer.cache.get_by_key(f"{k8s.ns}/first"))
        k8s.emu.faults.drop_watches()  # informer reconnects from its last RV ...
        churn(k8s, 250)  # ... which is expired by now: 410 Gone, relist
        make(k8s, "last")
        eventually(lambda: informer.cache.get_by_key(f"{k8s.ns}/last"), timeout=10)
        assert informer.cache.get_by_key(f"{k8s.ns}/churn").data == {"i": "249"}
    finally:
        informer.stop()


def test_watch_across_namespaces_sees_all(k8s):
    other = k8s.emu.namespace("other")
    rv = k8s.core.list_config_map_for_all_namespaces().metadata.resource_version
    make(k8s, "here")
    k8s.core.create_namespaced_config_map(other, {"metadata": {"name": "there"}})
    w = watch.Watch()
    got = {
        (e["object"].metadata.namespace, e["object"].metadata.name)
        for e in w.stream(
            k8s.core.list_config_map_for_all_namespaces, resource_version=rv, timeout_seconds=1
        )
    }
    assert got == {(k8s.ns, "here"), (other, "there")}


def test_custom_object_watch_streams_dicts(widgets):
    rv = widgets.custom.list_namespaced_custom_object("example.com", "v1", widgets.ns, "widgets")[
        "metadata"
    ]["resourceVersion"]
    widgets.widget("w", {"size": 1})
    out: list = []

    def run() -> None:
        w = watch.Watch()
        for e in w.stream(
            widgets.custom.list_namespaced_custom_object,
            "example.com",
            "v1",
            widgets.ns,
            "widgets",
            resource_version=rv,
            timeout_seconds=1,
        ):
            out.append((e["type"], e["object"]["metadata"]["name"], e["object"]["spec"]["color"]))

    t = threading.Thread(target=run)
    t.start()
    t.join(5)
    assert out == [("ADDED", "w", "red")]
