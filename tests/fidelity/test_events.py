"""Events: what the controller posts (core/v1, as client-go's recorder), how it lists, and
how the same stored Event reads through events.k8s.io/v1.

Real: both backends over raw HTTP. Faked: nothing. The controller reports transitions as
core/v1 Events; `kubectl events` and `kubectl describe` read them back through either API.
"""

from __future__ import annotations

from typing import Any

from tests.fidelity.conftest import Cluster

STAMP = "2026-01-02T03:04:05Z"


def controller_event(kube: Cluster, *, name: str = "once", namespace: str = "") -> dict[str, Any]:
    """The body longrun's controller posts (controller/kube/cluster.py `_event_body`)."""
    namespace = namespace or kube.ns
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "longrun.dev/v1alpha1", "kind": "InferenceRun",
                           "name": name, "namespace": namespace, "uid": "u-1",
                           "resourceVersion": "7"},
        "type": "Warning",
        "reason": "JobRefused",
        "message": "exceeded quota",
        "source": {"component": "longrun-controller"},
        "reportingComponent": "longrun.dev/controller",
        "reportingInstance": "controller-0",
        "firstTimestamp": STAMP,
        "lastTimestamp": STAMP,
        "count": 1,
    }  # fmt: skip


def post_core(kube: Cluster, body: dict[str, Any]) -> Any:
    return kube.raw("POST", f"/api/v1/namespaces/{kube.ns}/events", body)


def test_a_controller_event_is_stored_as_sent(kube: Cluster) -> None:
    answer = post_core(kube, controller_event(kube))
    assert answer.status == 201, answer.body
    event = answer.body
    assert event["metadata"]["name"].startswith("once.")
    sent = controller_event(kube)
    for field in (
        "involvedObject",
        "type",
        "reason",
        "message",
        "source",
        "count",
        "firstTimestamp",
        "lastTimestamp",
        "reportingComponent",
        "reportingInstance",
    ):
        assert event[field] == sent[field], field  # fmt: skip
    assert event.get("eventTime") is None


def test_events_are_listed_by_involved_object_and_reason(kube: Cluster) -> None:
    post_core(kube, controller_event(kube, name="once"))
    post_core(kube, controller_event(kube, name="other"))
    path = f"/api/v1/namespaces/{kube.ns}/events"
    selected = kube.raw(
        "GET",
        path,
        query={"fieldSelector": "involvedObject.name=once,involvedObject.kind=InferenceRun"},
    )
    assert [e["involvedObject"]["name"] for e in selected.body["items"]] == ["once"]
    by_reason = kube.raw("GET", path, query={"fieldSelector": "reason=JobRefused,type=Warning"})
    assert len(by_reason.body["items"]) == 2


def test_a_core_event_reads_through_events_k8s_io(kube: Cluster) -> None:
    name = post_core(kube, controller_event(kube)).body["metadata"]["name"]
    answer = kube.raw("GET", f"/apis/events.k8s.io/v1/namespaces/{kube.ns}/events/{name}")
    event = answer.body
    sent = controller_event(kube)
    assert (event["apiVersion"], event["kind"]) == ("events.k8s.io/v1", "Event")
    assert event["regarding"] == sent["involvedObject"]
    assert (event["note"], event["reason"], event["type"]) == (
        "exceeded quota", "JobRefused", "Warning"
    )  # fmt: skip
    assert event["reportingController"] == "longrun.dev/controller"
    assert event["reportingInstance"] == "controller-0"
    assert event["deprecatedSource"] == {"component": "longrun-controller"}
    assert event["deprecatedCount"] == 1
    assert event["deprecatedFirstTimestamp"] == STAMP
    assert event["deprecatedLastTimestamp"] == STAMP
    assert event.get("eventTime") is None


def test_an_events_k8s_io_event_reads_through_core_v1(kube: Cluster) -> None:
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e1"},
        "eventTime": "2026-01-02T03:04:05.000000Z",
        "reportingController": "longrun.dev/controller",
        "reportingInstance": "controller-0",
        "action": "Create",
        "reason": "Created",
        "regarding": {"kind": "InferenceRun", "name": "once", "namespace": kube.ns},
        "note": "created the Job",
        "type": "Normal",
    }
    created = kube.raw("POST", f"/apis/events.k8s.io/v1/namespaces/{kube.ns}/events", body)
    assert created.status == 201, created.body
    core = kube.raw("GET", f"/api/v1/namespaces/{kube.ns}/events/e1").body
    assert core["involvedObject"] == body["regarding"]
    assert (core["message"], core["reason"], core["type"], core["action"]) == (
        "created the Job", "Created", "Normal", "Create"
    )  # fmt: skip
    assert core["reportingComponent"] == "longrun.dev/controller"
    assert core["eventTime"] == "2026-01-02T03:04:05.000000Z"
    assert core.get("source", {}) == {}
    assert core.get("count") is None


def _post_events_v1(kube: Cluster, **fields: Any) -> Any:
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
            "regarding": {"kind": "InferenceRun", "name": "once", "namespace": kube.ns},
            "type": "Normal", **fields}  # fmt: skip
    return kube.raw("POST", f"/apis/events.k8s.io/v1/namespaces/{kube.ns}/events", body)


def test_an_events_k8s_io_event_needs_an_event_time(kube: Cluster) -> None:
    answer = _post_events_v1(kube)
    assert answer.status == 422
    assert answer.body["message"] == 'Event "e1" is invalid: eventTime: Required value'
    assert answer.body["details"]["kind"] == "Event"  # validated as the core type: no group


def test_an_events_k8s_io_event_needs_who_reported_it(kube: Cluster) -> None:
    answer = _post_events_v1(kube, eventTime="2026-01-02T03:04:05.000000Z", type="Sometimes")
    assert answer.status == 422
    causes = [(c["field"], c["message"]) for c in answer.body["details"]["causes"]]
    assert causes == [
        ("reportingController", "Required value"),
        ("reportingController", 'Invalid value: "": name part must be non-empty'),
        ("reportingController", 'Invalid value: "": name part must consist of alphanumeric '
         "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
         "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
         "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
        ("reportingInstance", "Required value"),
        ("action", "Required value"),
        ("reason", "Required value"),
        ("type", 'Invalid value: "": has invalid value: Sometimes'),
    ]  # fmt: skip


def test_an_event_about_another_namespace_is_refused(kube: Cluster) -> None:
    body = controller_event(kube)
    body["involvedObject"]["namespace"] = "elsewhere"
    answer = post_core(kube, body)
    assert answer.status == 422
    name = answer.body["details"]["name"]
    assert name.startswith("once.")  # generated before validation
    assert answer.body["message"] == (
        f'Event "{name}" is invalid: involvedObject.namespace: Invalid value: "elsewhere": '
        "does not match event.namespace"
    )
