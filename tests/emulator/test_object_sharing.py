"""Stored objects are shared, never changed: what one reader holds, no writer alters.

The store hands the same dicts to every reader (controllers, watch streams, list
and get answers) and a new version shares its unchanged parts with the previous
one, so nothing may change a stored dict in place, and nothing a caller keeps may
end up inside one. Real: the emulator's Api, store, built-in controllers and HTTP
watch streams. The emulator's tests also run with KUBE_EMULATOR_AUDIT=1 (see
conftest), which checks every stored version of every test when its emulator stops.
"""

from __future__ import annotations

import copy
import http.client
import json
import threading
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client, watch

from e2e.emulator.patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from e2e.emulator.store import Store
from e2e.fixtures import eventually


def rt(k8s, group: str, version: str, plural: str):
    found = k8s.emu.emulator.registry.get(group, version, plural)
    assert found is not None
    return found


class Versions:
    """Every version the store emits (new and old objects), with its JSON at that moment."""

    def __init__(self, store: Store) -> None:
        self.seen: list[tuple[Any, str]] = []
        store.add_listener(self.record)

    def record(self, event: Any) -> None:
        for obj in (event.obj, event.old):
            if obj is not None:
                self.seen.append((obj, json.dumps(obj, sort_keys=True)))

    def changed(self) -> list[str]:
        return [text for obj, text in self.seen if json.dumps(obj, sort_keys=True) != text]


def test_changing_a_body_after_handing_it_to_the_api_changes_nothing_stored(widgets):
    api = widgets.emu.emulator.api
    cms = rt(widgets, "", "v1", "configmaps")
    body = {"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"}}
    api.create(cms, widgets.ns, body)
    body["metadata"]["labels"]["x"] = "2"
    body["data"]["k"] = "changed"
    update = copy.deepcopy(api.get(cms, widgets.ns, "a"))
    update["data"] = {"k": "v2"}
    api.update(cms, widgets.ns, "a", update)
    update["data"]["k"] = "changed"
    stored = api.get(cms, widgets.ns, "a")
    assert stored["metadata"]["labels"] == {"x": "1"}
    assert stored["data"] == {"k": "v2"}

    widget_rt = rt(widgets, "example.com", "v1", "widgets")
    widgets.widget("w", {"size": 1, "tags": ["a"]})
    patch = {"spec": {"tags": ["b"], "params": {"p": "1"}}}
    api.patch(widget_rt, widgets.ns, "w", patch, content_type=MERGE_PATCH)
    patch["spec"]["tags"].append("c")
    patch["spec"]["params"]["p"] = "2"
    ops = [{"op": "add", "path": "/spec/free", "value": {"nested": [1]}}]
    api.patch(widget_rt, widgets.ns, "w", ops, content_type=JSON_PATCH)
    ops[0]["value"]["nested"].append(2)
    spec = api.get(widget_rt, widgets.ns, "w")["spec"]
    assert spec["tags"] == ["b"]
    assert spec["params"] == {"p": "1"}
    assert spec["free"] == {"nested": [1]}


def test_writes_never_change_a_stored_version_in_place(widgets):
    """Each kind of write, each holding on to the versions before it."""
    emu = widgets.emu.emulator
    versions = Versions(emu.store)
    api = emu.api
    ns = widgets.ns
    widget_rt = rt(widgets, "example.com", "v1", "widgets")
    widgets.widget("w", {"size": 1, "tags": ["a"], "limits": {}}, finalizers=["keep"])
    api.patch(widget_rt, ns, "w", {"spec": {"size": 2}}, content_type=MERGE_PATCH)
    status = {"status": {"phase": "Running", "observedGeneration": 2}}
    api.patch(widget_rt, ns, "w", status, content_type=MERGE_PATCH, subresource="status")
    ops = [{"op": "replace", "path": "/spec/tags/0", "value": "z"}]
    api.patch(widget_rt, ns, "w", ops, content_type=JSON_PATCH)
    current = copy.deepcopy(api.get(widget_rt, ns, "w"))
    current["spec"]["note"] = None
    api.update(widget_rt, ns, "w", current)
    api.delete(widget_rt, ns, "w")  # held by its finalizer: marked, not removed
    api.patch(widget_rt, ns, "w", {"metadata": {"finalizers": None}}, content_type=MERGE_PATCH)

    cms = rt(widgets, "", "v1", "configmaps")
    api.create(cms, ns, {"metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}})
    patch = {"metadata": {"labels": {"a": "c"}}, "data": {"k": "w"}}
    api.patch(cms, ns, "c", patch, content_type=STRATEGIC_PATCH)

    jobs = rt(widgets, "batch", "v1", "jobs")
    container = {"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    api.create(jobs, ns, {"metadata": {"name": "j"}, "spec": {"template": template}})

    def job_complete() -> bool:
        job = api.get(jobs, ns, "j")
        return any(c["type"] == "Complete" for c in job.get("status", {}).get("conditions", []))

    eventually(job_complete)  # pods bound, run, counted and released by the controllers
    namespaces = rt(widgets, "", "v1", "namespaces")
    api.delete(namespaces, "", ns)
    eventually(lambda: emu.store.get("namespaces", "", ns) is None)
    assert len(versions.seen) > 20
    assert versions.changed() == []


def test_the_audit_reports_a_stored_version_changed_in_place():
    store = Store(audit=True)
    meta = {"name": "c", "namespace": "n", "uid": "u"}
    stored = store.put("configmaps", {"metadata": meta, "data": {}})
    store.put("configmaps", {**stored, "metadata": {**stored["metadata"]}, "data": {"a": "1"}})
    assert store.verify_unchanged() == []
    stored["data"]["sneaky"] = "x"
    assert store.verify_unchanged() == ["n/c@1"]


def test_each_watcher_sees_an_event_in_its_own_api_version(k8s_factory):
    """One stored Event, watched through core/v1 and events.k8s.io/v1 at once."""
    k8s = k8s_factory(agent=False)  # no node agent: its watches would count too
    seen: dict[str, list[dict[str, Any]]] = {"core": [], "events": []}
    url = urlsplit(k8s.emu.url)

    def follow(name: str, prefix: str) -> None:
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
        conn.request("GET", f"{prefix}/namespaces/{k8s.ns}/events?watch=true&timeoutSeconds=5")
        seen[name].append(json.loads(conn.getresponse().readline())["object"])
        conn.close()

    threads = [
        threading.Thread(target=follow, args=("core", "/api/v1")),
        threading.Thread(target=follow, args=("events", "/apis/events.k8s.io/v1")),
    ]
    for t in threads:
        t.start()
    eventually(lambda: len(k8s.emu.emulator.open_watches()) == 2)
    body = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": k8s.ns},
        "reason": "Tested",
        "message": "hello",
        "type": "Normal",
    }
    k8s.core.create_namespaced_event(k8s.ns, body)
    for t in threads:
        t.join(timeout=10)
    (core,) = seen["core"]
    (events,) = seen["events"]
    assert (core["apiVersion"], core["message"]) == ("v1", "hello")
    assert (events["apiVersion"], events["note"]) == ("events.k8s.io/v1", "hello")
    assert "message" not in events and "note" not in core


def test_a_burst_of_writes_reaches_every_watcher_complete_and_in_order(k8s_factory):
    k8s = k8s_factory(agent=False)  # no node agent: its watches would count too
    api = k8s.emu.api_client()
    names = [f"c{i:03d}" for i in range(120)]
    received: list[list[tuple[str, str, int]]] = [[], [], []]

    def follow(out: list[tuple[str, str, int]]) -> None:
        stream = watch.Watch().stream(
            client.CoreV1Api(api).list_namespaced_config_map, k8s.ns, timeout_seconds=10
        )
        for event in stream:
            meta = event["object"].metadata
            out.append((event["type"], meta.name, int(meta.resource_version)))
            if len(out) == 2 * len(names):
                return

    threads = [threading.Thread(target=follow, args=(out,)) for out in received]
    for t in threads:
        t.start()
    eventually(lambda: len(k8s.emu.emulator.open_watches()) == 3)

    def write(part: list[str]) -> None:
        core = client.CoreV1Api(api)
        for name in part:
            core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": name}})
            core.patch_namespaced_config_map(name, k8s.ns, {"data": {"k": "v"}})

    writers = [threading.Thread(target=write, args=(names[i::4],)) for i in range(4)]
    for t in writers:
        t.start()
    for t in writers + threads:
        t.join(timeout=30)
    for out in received:
        assert out == received[0]
        assert [rv for _, _, rv in out] == sorted(rv for _, _, rv in out)
        assert sorted(name for kind, name, _ in out if kind == "ADDED") == names
        assert sorted(name for kind, name, _ in out if kind == "MODIFIED") == names
