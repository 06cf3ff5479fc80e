"""The run adapter's caches: what they keep, which events wake a run, echoes of writes in flight.

Real: `KubeCluster` and `kept.py` on plain dicts, and `Transport` on the official client's
configuration and urllib3 pool, over a real socket to a local HTTP server. Faked: the API
server (that local server, or a transport whose answer comes after the watch's echo).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s

from controller.core.ports import Obj
from controller.kube import KubeCluster, Transport
from controller.kube.kept import is_news, kept

NS = "ns"


def pod(phase: str = "Pending", **status: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "run-x1",
            "namespace": NS,
            "uid": "p1",
            "resourceVersion": "10",
            "labels": {"batch.kubernetes.io/job-name": "run"},
            "annotations": {"longrun.dev/run": "run"},
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"containers": [{"name": "runner", "image": "x"}], "nodeName": "node"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}], **status},
    }


def terminated(message: str) -> list[Obj]:
    state = {"terminated": {"exitCode": 0, "message": message, "reason": "Completed"}}
    return [
        {"name": "runner", "state": state, "ready": False, "image": "x", "restartCount": 0},
        {"name": "sidecar", "state": {"running": {}}, "ready": True},
    ]


def test_a_pod_keeps_its_phase_and_the_runner_termination_only() -> None:
    raw = pod("Succeeded", containerStatuses=terminated('{"recordsRead": 1}'), podIP="10.0.0.1")
    got = kept("Pod", raw)
    assert got["status"] == {
        "phase": "Succeeded",
        "containerStatuses": [
            {
                "name": "runner",
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "message": '{"recordsRead": 1}',
                        "reason": "Completed",
                    }
                },
            }
        ],
    }
    assert "spec" not in got
    assert set(got["metadata"]) == {
        "name", "namespace", "uid", "resourceVersion", "labels", "annotations"
    }  # fmt: skip
    assert "managedFields" in raw["metadata"]  # the decoded event is left as it was


def test_a_job_keeps_suspend_and_the_status_the_controller_reads() -> None:
    raw = {
        "kind": "Job",
        "metadata": {"name": "run", "namespace": NS, "resourceVersion": "3", "generation": 2},
        "spec": {"suspend": False, "template": {"spec": {}}, "backoffLimit": 3},
        "status": {
            "active": 1,
            "ready": 1,
            "startTime": "2026-01-01T00:00:00Z",
            "uncountedTerminatedPods": {},
            "conditions": [
                {
                    "type": "SuccessCriteriaMet",
                    "status": "True",
                    "lastProbeTime": "x",
                    "lastTransitionTime": "y",
                }
            ],
        },
    }
    got = kept("Job", raw)
    assert got["spec"] == {"suspend": False}
    assert got["status"] == {
        "active": 1,
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "y"}],
    }


def test_a_run_loses_only_its_managed_fields_and_shares_its_strings() -> None:
    def decoded() -> Obj:
        text = json.dumps(
            {
                "metadata": {"name": "r", "namespace": NS, "managedFields": [{}], "labels": {}},
                "spec": {"configRef": {"name": "cfg"}},
                "status": {"phase": "Pending", "message": "x" * 100},
            }
        )
        loaded: Obj = json.loads(text)
        return loaded

    first, second = kept("InferenceRun", decoded()), kept("InferenceRun", decoded())
    assert first == {
        "metadata": {"name": "r", "namespace": NS, "labels": {}},
        "spec": {"configRef": {"name": "cfg"}},
        "status": {"phase": "Pending", "message": "x" * 100},
    }
    key_one = next(k for k in first["status"] if k == "phase")
    key_two = next(k for k in second["status"] if k == "phase")
    assert key_one is key_two  # one string for every cached run's key
    assert first["status"]["phase"] is second["status"]["phase"]


def test_news_is_any_kept_change_but_the_resource_version() -> None:
    before = kept("Pod", pod())
    scheduled = pod(conditions=[{"type": "PodScheduled", "status": "True"}])
    scheduled["metadata"]["resourceVersion"] = "11"
    assert not is_news(before, kept("Pod", scheduled))
    assert is_news(before, kept("Pod", pod("Running")))
    assert is_news(None, before)


def test_pod_updates_wake_the_run_batched_only_when_they_change_what_is_read() -> None:
    added: list[tuple[str, bool]] = []

    def enqueue(key: str, *, urgent: bool = False, batched: bool = False) -> None:
        added.append((key, batched))

    cluster = KubeCluster(Transport(k8s.ApiClient()), enqueue=enqueue)  # never started
    versions = iter(range(20, 40))

    def event(raw: Obj) -> None:
        raw["metadata"]["resourceVersion"] = str(next(versions))
        cluster._on_event("Pod", kept("Pod", raw), present=True)

    event(pod())  # a new pod
    event(pod(conditions=[{"type": "PodScheduled", "status": "True"}]))  # scheduled
    unfinalized = pod()
    unfinalized["metadata"]["finalizers"] = []
    event(unfinalized)  # a finalizer removed
    event(pod("Running"))
    assert added == [("ns/run", True), ("ns/run", True)]


def _deleted(cluster: KubeCluster, raw: Obj) -> None:
    cluster._on_event("Pod", kept("Pod", raw), present=False)


def _named(raw: Obj, name: str) -> Obj:
    raw["metadata"]["name"] = name
    return raw


def test_a_pod_deleted_after_its_runner_ended_stays_readable_for_its_run() -> None:
    cluster = KubeCluster(Transport(k8s.ApiClient()), enqueue=lambda key, **_: None)
    ended = pod("Failed", containerStatuses=terminated('{"recordsWritten": 240}'))
    cluster._on_event("Pod", kept("Pod", ended), present=True)
    _deleted(cluster, ended)
    _deleted(cluster, _named(pod("Running"), "run-x2"))  # its runner had not ended: not kept
    children = cluster.children(NS, "run")
    assert children.pods == []
    [stopped] = children.stopped_pods
    state = stopped["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["message"] == '{"recordsWritten": 240}'


def test_stopped_pods_are_few_per_run_and_go_with_the_run() -> None:
    cluster = KubeCluster(Transport(k8s.ApiClient()), enqueue=lambda key, **_: None)
    for index in range(6):
        message = f'{{"recordsWritten": {index}}}'
        _deleted(cluster, _named(pod("Failed", containerStatuses=terminated(message)), f"p{index}"))
    kept_names = [p["metadata"]["name"] for p in cluster.children(NS, "run").stopped_pods]
    assert kept_names == ["p2", "p3", "p4", "p5"]  # the last four deleted
    run_obj = {"kind": "InferenceRun", "metadata": {"name": "run", "namespace": NS}, "spec": {}}
    cluster._on_event("InferenceRun", run_obj, present=False)
    assert cluster.children(NS, "run").stopped_pods == []


class EchoFirst:
    """A transport whose answer to a write comes after the watch delivered its echo."""

    def __init__(self, deliver: Any) -> None:
        self.deliver = deliver

    def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        answer: Obj = json.loads(json.dumps(kwargs["body"]))
        answer["metadata"]["resourceVersion"] = "7"
        echo = threading.Thread(target=self.deliver, args=(answer,))
        echo.start()  # the informer's thread hands the echo on first
        echo.join()
        return answer


def config_map(name: str = "run-contract") -> Obj:
    meta = {"name": name, "namespace": NS, "annotations": {"longrun.dev/run": "run"}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "b"}}


@pytest.mark.parametrize("echo_changed", [False, True])
def test_an_echo_before_the_answer_is_known_for_ours(echo_changed: bool) -> None:
    added: list[str] = []

    def enqueue(key: str, *, urgent: bool = False, batched: bool = False) -> None:
        added.append(key)

    def deliver(answer: Obj) -> None:
        echo = json.loads(json.dumps(answer))
        if echo_changed:  # someone else's change came between: it must wake the run
            echo["metadata"]["resourceVersion"] = "8"
        cluster._handler("ConfigMap", present=True)(kept("ConfigMap", echo))

    cluster = KubeCluster(EchoFirst(deliver), enqueue=enqueue)  # type: ignore[arg-type]
    created = cluster.create("ConfigMap", config_map())
    assert created["metadata"]["resourceVersion"] == "7"
    assert added == (["ns/run"] if echo_changed else [])


# -- the transport ------------------------------------------------------------------------


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server answering `{}` and recording each request."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            seen.append({"method": self.command, "path": self.path,
                         "headers": dict(self.headers), "body": body})  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_PATCH = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()
    thread.join()


def test_transport_sends_the_client_credentials_headers_and_query(
    recorder: tuple[str, list[dict[str, Any]]],
) -> None:
    url, seen = recorder
    configuration = k8s.Configuration(
        host=url, api_key={"authorization": "token-1"}, api_key_prefix={"authorization": "Bearer"}
    )
    transport = Transport(k8s.ApiClient(configuration))
    query = [("labelSelector", "app.kubernetes.io/managed-by=longrun"), ("watch", False)]
    assert transport.request("GET", "/api/v1/pods", query=query) == {}
    configuration.api_key["authorization"] = "token-2"  # as a token file's refresh hook does
    transport.request(
        "PATCH", "/api/v1/namespaces/ns/configmaps/c", body={"data": {"a": "é"}},
        content_type="application/merge-patch+json",
    )  # fmt: skip
    get, patch = seen
    assert get["path"] == (
        "/api/v1/pods?labelSelector=app.kubernetes.io/managed-by%3Dlongrun&watch=false"
    )
    assert get["headers"]["authorization"] == "Bearer token-1"
    assert patch["headers"]["authorization"] == "Bearer token-2"  # asked for on every request
    assert patch["headers"]["Content-Type"] == "application/merge-patch+json"
    assert patch["headers"]["User-Agent"] == k8s.ApiClient().user_agent
    assert json.loads(patch["body"]) == {"data": {"a": "é"}}


def test_every_informer_watch_hands_raw_objects_to_the_trimming_watch() -> None:
    """kubernetes.watch.Watch reads the list function's `:rtype:`: only `object` keeps the
    events raw, so that LeanWatch trims them; any other answer caches the client's models."""
    from kubernetes.watch import Watch

    cluster = KubeCluster(Transport(k8s.ApiClient()), enqueue=lambda *_a, **_k: None)
    informers = [i for group in cluster._informers.values() for i in group]
    assert informers
    assert {Watch().get_return_type(i._list_func) for i in informers} == {"object"}
