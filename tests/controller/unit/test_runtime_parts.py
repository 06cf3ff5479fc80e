"""Work queue, settings and metrics: plain Python objects, nothing faked but a monotonic clock.

The metrics are real prometheus_client registries, read back through its own text parser.
"""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.core.settings import SettingsError, parse_duration, settings_from_env
from controller.runtime import main
from controller.runtime.logs import configure
from controller.runtime.metrics import Metrics
from controller.runtime.workqueue import WorkQueue


class Tick:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_queue_deduplicates_keys() -> None:
    q = WorkQueue()
    for _ in range(3):
        q.add("ns/a")
    q.add("ns/b")
    assert len(q) == 2


def test_key_added_while_processing_is_requeued_after_done() -> None:
    q = WorkQueue()
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a")
    assert q.get(timeout=0) is None  # exclusive: not handed to a second worker
    q.done("ns/a")
    assert q.get(timeout=0) == "ns/a"


def drain(q: WorkQueue) -> list[str]:
    taken = []
    while (key := q.get(timeout=0)) is not None:
        taken.append(key)
        q.done(key)
    return taken


def test_urgent_keys_are_handed_out_first_in_the_order_they_came() -> None:
    q = WorkQueue()
    q.add("ns/old-1")
    q.add("ns/new-1", urgent=True)
    q.add("ns/old-2")
    q.add("ns/new-2", urgent=True)
    assert len(q) == 4
    assert drain(q) == ["ns/new-1", "ns/new-2", "ns/old-1", "ns/old-2"]


def test_a_queued_key_made_urgent_moves_ahead_once() -> None:
    q = WorkQueue()
    q.add("ns/a")
    q.add("ns/b")
    q.add("ns/b", urgent=True)
    q.add("ns/b")  # still urgent: a normal add does not lower it
    assert len(q) == 2
    assert drain(q) == ["ns/b", "ns/a"]
    q.add("ns/b")  # the stale normal entry left behind is not handed out twice
    assert drain(q) == ["ns/b"]


def test_key_made_urgent_while_processing_is_requeued_urgent() -> None:
    q = WorkQueue()
    q.add("ns/a")
    q.add("ns/b")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a", urgent=True)
    q.done("ns/a")
    assert drain(q) == ["ns/a", "ns/b"]


def test_batched_adds_of_a_key_wait_the_period_and_make_one_pass() -> None:
    tick = Tick()
    q = WorkQueue(batch_period=1.0, monotonic=tick)
    q.add("ns/a", batched=True)
    tick.t = 0.5
    q.add("ns/a", batched=True)  # joins the batch: not one pass more, not later
    assert q.get(timeout=0) is None
    tick.t = 1.0
    assert drain(q) == ["ns/a"]
    tick.t = 5.0
    assert drain(q) == []


def test_a_plain_add_serves_a_waiting_batch_at_once() -> None:
    tick = Tick()
    q = WorkQueue(batch_period=1.0, monotonic=tick)
    q.add("ns/a", batched=True)
    q.add("ns/a", urgent=True)
    assert drain(q) == ["ns/a"]
    tick.t = 2.0
    assert drain(q) == []  # the batch was served by that pass


def test_a_batched_add_of_a_queued_key_changes_nothing() -> None:
    tick = Tick()
    q = WorkQueue(batch_period=1.0, monotonic=tick)
    q.add("ns/a")
    q.add("ns/a", batched=True)  # the queued pass reads what the add is about
    assert drain(q) == ["ns/a"]
    tick.t = 2.0
    assert drain(q) == []


def test_a_batched_add_while_processing_is_handed_out_after_the_period() -> None:
    tick = Tick()
    q = WorkQueue(batch_period=1.0, monotonic=tick)
    q.add("ns/a")
    assert q.get(timeout=0) == "ns/a"
    q.add("ns/a", batched=True)  # the pass in flight may have read before the event
    q.done("ns/a")
    assert q.get(timeout=0) is None
    tick.t = 1.0
    assert drain(q) == ["ns/a"]


def test_without_a_batch_period_batched_adds_queue_at_once() -> None:
    q = WorkQueue()
    q.add("ns/a", batched=True)
    assert drain(q) == ["ns/a"]


def test_a_delayed_key_is_handed_out_while_the_worker_that_waited_for_it_is_busy() -> None:
    q = WorkQueue(batch_period=0.2)
    got: list[str | None] = []
    workers = [threading.Thread(target=lambda: got.append(q.get(timeout=30))) for _ in range(2)]
    for worker in workers:
        worker.start()
    q.add("ns/later", batched=True)  # one idle worker now waits for it to come due
    q.add("ns/now")  # and may be the one that takes this, and keeps it
    for worker in workers:
        worker.join(timeout=30)  # far above the 0.2 s batch: a bound for a hang only
    assert sorted(k for k in got if k) == ["ns/later", "ns/now"]


def test_retries_back_off_exponentially_and_forget_resets() -> None:
    tick = Tick()
    q = WorkQueue(base_delay=1.0, monotonic=tick)
    for expected in (1.0, 2.0, 4.0):
        q.add_rate_limited("ns/a")
        tick.t += expected - 0.01
        assert q.get(timeout=0) is None
        tick.t += 0.02
        assert q.get(timeout=0) == "ns/a"
        q.done("ns/a")
        tick.t = 0.0 if expected == 0 else tick.t
    assert q.retries("ns/a") == 3
    q.forget("ns/a")
    assert q.retries("ns/a") == 0


def test_shutdown_wakes_waiting_workers() -> None:
    q = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(q.get()))
    worker.start()
    q.shutdown()
    worker.join(timeout=5)
    assert got == [None]


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("1m", 60), ("300", 300), ("1h30m", 5400), ("250ms", 0.25)]
)
def test_durations_accept_go_style_and_bare_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_setting_fails_with_a_message_naming_it() -> None:
    with pytest.raises(SettingsError, match="POLLING_INTERVAL"):
        settings_from_env({"POLLING_INTERVAL": "soon"})
    with pytest.raises(SettingsError, match="MAX_RECONCILE_RATE"):
        settings_from_env({"MAX_RECONCILE_RATE": "0"})
    with pytest.raises(SettingsError, match="PROGRESS_INTERVAL"):
        settings_from_env({"PROGRESS_INTERVAL": "often"})


def test_progress_interval_defaults_to_15_seconds() -> None:
    assert settings_from_env({}).progress_interval == 15.0
    assert settings_from_env({"PROGRESS_INTERVAL": "1m"}).progress_interval == 60.0


def test_settings_from_env() -> None:
    s = settings_from_env(
        {
            "WATCH_NAMESPACES": "a, b",
            "ALLOWED_IMAGES": "ghcr.io/x/*",
            "LEADER_ELECTION": "false",
            "POD_NAMESPACE": "ops",
        }
    )
    assert s.watch_namespaces == ("a", "b") and not s.leader_election
    assert s.leader_election_namespace == "ops"
    assert s.allowed_images == ("ghcr.io/x/*",)


def test_metrics_use_controller_runtime_names() -> None:
    m = Metrics()
    m.reconcile_total.inc(result="success")
    m.runs.replace({"Running": 2}, label="phase")
    text = m.render()
    assert (
        'controller_runtime_reconcile_total{controller="inferencerun",result="success"} 1' in text
    )
    assert 'longrun_runs{phase="Running"} 2' in text
    for name in (
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_retries_total",
        "leader_election_master_status",
        "rest_client_requests_total",
    ):
        assert f"# TYPE {name.removesuffix('_bucket')}" in text


def _samples(m: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(m.render())
        for s in family.samples
    }


def test_metrics_keep_controller_runtime_labels() -> None:
    m = Metrics()
    m.reconcile_errors.inc()
    m.reconcile_time.observe(0.3)
    m.workqueue_depth.set(4)
    m.leader.set(1)
    m.rest_requests.inc(method="PATCH")
    samples = _samples(m)
    ctrl = (("controller", "inferencerun"),)
    assert samples[("controller_runtime_reconcile_errors_total", ctrl)] == 1
    assert samples[("controller_runtime_reconcile_time_seconds_count", ctrl)] == 1
    assert samples[("controller_runtime_reconcile_time_seconds_bucket", (*ctrl, ("le", "0.5")))]
    assert samples[("workqueue_depth", (("name", "inferencerun"),))] == 4
    assert samples[("leader_election_master_status", (("name", "longrun-controller"),))] == 1
    assert samples[("rest_client_requests_total", (("method", "PATCH"),))] == 1
    assert m.reconcile_errors.value() == 1 and m.rest_requests.value(method="PATCH") == 1
    assert m.reconcile_time.value() == 1 and m.reconcile_total.value(result="error") == 0


def test_metrics_include_process_and_platform_metrics() -> None:
    names = {name for name, _ in _samples(Metrics())}
    assert {
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_info",
        "python_gc_collections_total",
    } <= names


def test_series_without_varying_labels_are_exported_at_zero() -> None:
    samples = _samples(Metrics())
    assert samples[("leader_election_master_status", (("name", "longrun-controller"),))] == 0
    assert (
        samples[("controller_runtime_reconcile_errors_total", (("controller", "inferencerun"),))]
        == 0
    )


def test_metrics_export_no_created_series() -> None:
    m = Metrics()
    m.reconcile_total.inc(result="success")
    assert "_created" not in m.render()


def test_each_metrics_object_has_a_registry_of_its_own() -> None:
    first, second = Metrics(), Metrics()  # a shared registry would refuse the second
    first.reconcile_total.inc(result="success")
    assert second.reconcile_total.value(result="success") == 0
    assert first.registry is not second.registry


def test_runs_gauge_drops_phases_no_run_is_in_any_more() -> None:
    m = Metrics()
    m.runs.replace({"Running": 2, "Pending": 1}, label="phase")
    m.runs.replace({"Succeeded": 3}, label="phase")
    runs = {labels: v for (name, labels), v in _samples(m).items() if name == "longrun_runs"}
    assert runs == {(("phase", "Succeeded"),): 3}


def test_bind_addresses_default_to_loopback() -> None:
    s = settings_from_env({})
    assert (s.metrics_bind_address, s.health_bind_address) == ("127.0.0.1", "127.0.0.1")


@pytest.mark.parametrize("address", ["0.0.0.0", "10.1.2.3", "::", "fd00::1"])
def test_bind_addresses_accept_ipv4_and_ipv6(address: str) -> None:
    s = settings_from_env({"METRICS_BIND_ADDRESS": address, "HEALTH_BIND_ADDRESS": address})
    assert s.metrics_bind_address == s.health_bind_address == address


@pytest.mark.parametrize("name", ["METRICS_BIND_ADDRESS", "HEALTH_BIND_ADDRESS"])
def test_bad_bind_address_fails_naming_the_variable(name: str) -> None:
    with pytest.raises(SettingsError, match=f"{name}='my-host' is not an IP address"):
        settings_from_env({name: "my-host"})


def test_bind_address_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    monkeypatch.setenv("METRICS_BIND_ADDRESS", "0.0.0.0")
    monkeypatch.setenv("HEALTH_BIND_ADDRESS", "0.0.0.0")
    parser = argparse.ArgumentParser()
    main.add_parser(parser.add_subparsers())
    args = parser.parse_args(["controller", "--metrics-bind-address", "127.0.0.1"])
    s = main.settings_from_args(args)
    assert (s.metrics_bind_address, s.health_bind_address) == ("127.0.0.1", "0.0.0.0")


def test_loopback_endpoints_in_a_pod_are_reported_with_the_setting_to_change() -> None:
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    warnings = main.loopback_warnings(settings_from_env({}), in_pod)
    assert len(warnings) == 2 and "HEALTH_BIND_ADDRESS=0.0.0.0" in warnings[0]
    chart = settings_from_env({"HEALTH_BIND_ADDRESS": "0.0.0.0", "METRICS_BIND_ADDRESS": "::"})
    assert main.loopback_warnings(chart, in_pod) == []
    assert main.loopback_warnings(settings_from_env({}), {}) == []  # started by hand


@pytest.mark.parametrize(("level", "renewals_logged"), [("INFO", False), ("DEBUG", True)])
def test_lease_renewals_are_logged_only_at_debug(level: str, renewals_logged: bool) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure(level=level, fmt="json")
        renewal = logging.getLogger("leaderelection")
        assert renewal.isEnabledFor(logging.INFO) is renewals_logged
        assert renewal.isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:], root.level = saved
        logging.getLogger("leaderelection").setLevel(logging.NOTSET)


def test_cluster_enqueues_new_runs_urgent_and_reported_runs_normal() -> None:
    from kubernetes import client as k8s

    from controller.kube import KubeCluster, Transport

    added: list[tuple[str, bool]] = []

    def enqueue(key: str, *, urgent: bool = False, batched: bool = False) -> None:
        added.append((key, urgent))

    cluster = KubeCluster(Transport(k8s.ApiClient()), enqueue=enqueue)  # never started
    new = {"metadata": {"namespace": "ns", "name": "a", "uid": "1", "generation": 1}}
    reported = {
        "metadata": {"namespace": "ns", "name": "b", "uid": "2", "generation": 1},
        "status": {"phase": "Running"},
    }
    cluster._on_event("InferenceRun", new, present=True)
    cluster._on_event("InferenceRun", reported, present=True)
    cluster._on_event("InferenceRun", reported, present=False)
    assert added == [("ns/a", True), ("ns/b", False), ("ns/b", False)]


def test_cluster_reconciles_a_run_recreated_under_the_same_name_but_not_status_echoes() -> None:
    from kubernetes import client as k8s

    from controller.kube import KubeCluster, Transport

    added: list[str] = []

    def enqueue(key: str, *, urgent: bool = False, batched: bool = False) -> None:
        added.append(key)

    cluster = KubeCluster(Transport(k8s.ApiClient()), enqueue=enqueue)  # never started
    first = {
        "metadata": {"namespace": "ns", "name": "a", "uid": "1", "generation": 1},
        "status": {"phase": "Running"},
    }
    cluster._on_event("InferenceRun", first, present=True)
    cluster._on_event("InferenceRun", {**first, "status": {"phase": "Succeeded"}}, present=True)
    assert added == ["ns/a"]  # a status-only update needs no pass
    # Deleted and created again while the watch was down: one MODIFIED, same generation.
    again = {**first, "metadata": {**first["metadata"], "uid": "2"}}
    cluster._on_event("InferenceRun", again, present=True)
    assert added == ["ns/a", "ns/a"]


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED", "BOOKMARK"])
def test_lean_watch_decodes_events_as_the_client_does_and_tracks_the_version(kind: str) -> None:
    import json

    from kubernetes.informer import informer
    from kubernetes.watch import Watch

    from controller.kube.informers import LeanInformer, LeanWatch

    obj = {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "42"}, "spec": {"a": [1]}}
    line = json.dumps({"type": kind, "object": obj})
    theirs, ours = Watch(), LeanWatch()
    assert ours.unmarshal_event(line, "object") == theirs.unmarshal_event(line, "object")
    assert ours.resource_version == theirs.resource_version == "42"
    assert ours.unmarshal_event("  ", "object") is None
    # The informer's loop stores a stock Watch(); ours takes that slot with a LeanWatch,
    # and the client library's own module is left as it is.
    lean = LeanInformer(lambda **_: None)
    lean._watch = Watch()
    assert type(lean._watch) is LeanWatch
    assert informer.Watch is Watch
