"""Fault injection, restart with state kept, the CLI entry point, startup time and scale.

Real: HTTP errors as the clients see them (status, Retry-After), sockets being
cut, a subprocess running `python -m e2e.cluster`. Faked: the failures are
injected on purpose.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from e2e.emulator import Emulator, EmulatorConfig
from e2e.fixtures import eventually

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("code", [409, 500, 503])
def test_next_request_fails_with_injected_status(k8s, code):
    k8s.emu.faults.fail_next("create", "configmaps", status=code)
    with pytest.raises(ApiException) as err:
        k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "a"}})
    assert err.value.status == code and json.loads(err.value.body)["code"] == code
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "a"}})  # only once


def test_too_many_requests_carries_retry_after(k8s):
    k8s.emu.faults.fail_next("list", "configmaps", status=429, retry_after=1, count=2)
    url = f"{k8s.emu.url}/api/v1/namespaces/{k8s.ns}/configmaps"
    for _ in range(2):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=5).close()
        with err.value as resp:
            body = json.loads(resp.read())
            assert resp.status == 429 and resp.headers["Retry-After"] == "1"
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 1
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200


def test_python_client_retries_429_after_retry_after(k8s):
    # urllib3 under the official client honours Retry-After and retries (up to 3 times).
    k8s.emu.faults.fail_next("list", "configmaps", status=429, retry_after=1)
    start = time.monotonic()
    k8s.core.list_namespaced_config_map(k8s.ns)
    assert time.monotonic() - start >= 0.9


def test_faults_match_subresources_separately(widgets):
    widgets.widget("w", {"size": 1})
    widgets.emu.faults.fail_next("patch", "widgets/status", status=409)
    widgets.custom.patch_namespaced_custom_object(
        "example.com", "v1", widgets.ns, "widgets", "w", {"spec": {"size": 2}}
    )
    with pytest.raises(ApiException):
        widgets.custom.patch_namespaced_custom_object_status(
            "example.com", "v1", widgets.ns, "widgets", "w", {"status": {"phase": "x"}}
        )


def test_drop_watches_cuts_open_streams(k8s_factory):
    k8s = k8s_factory(agent=False)  # no node agent: its watches would count too
    ended = threading.Event()

    def run() -> None:
        try:
            for _ in watch.Watch().stream(
                k8s.core.list_namespaced_config_map, k8s.ns, timeout_seconds=30
            ):
                pass
        except Exception:
            pass
        ended.set()

    t = threading.Thread(target=run)
    t.start()
    eventually(lambda: k8s.emu.emulator.open_watches())
    k8s.emu.faults.drop_watches()
    assert ended.wait(5)
    t.join()


def test_restart_keeps_state_and_port(k8s):
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "kept"}})
    url = k8s.emu.url
    rv = k8s.core.list_namespaced_config_map(k8s.ns).metadata.resource_version
    k8s.emu.restart()
    assert k8s.emu.url == url
    assert k8s.core.read_namespaced_config_map("kept", k8s.ns).metadata.name == "kept"
    k8s.core.create_namespaced_config_map(k8s.ns, {"metadata": {"name": "after"}})
    events = [
        e["object"].metadata.name
        for e in watch.Watch().stream(
            k8s.core.list_namespaced_config_map, k8s.ns, resource_version=rv, timeout_seconds=1
        )
    ]
    assert events == ["after"]


def test_emulator_starts_in_under_a_second():
    timings = []
    for _ in range(3):  # best of three: the CI box may be busy with other suites
        start = time.monotonic()
        emu = Emulator(EmulatorConfig()).start()
        timings.append(time.monotonic() - start)
        emu.stop()
    assert min(timings) < 1.0, timings


def test_two_emulators_run_side_by_side():
    with Emulator() as a, Emulator() as b:
        assert a.url != b.url and a.store is not b.store


def test_cluster_command_prints_kubeconfig_and_stops_on_ctrl_c(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "e2e.cluster", "--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        path = Path(proc.stdout.readline().strip())
        assert path == tmp_path / "kubeconfig" and "server: http://127.0.0.1:" in path.read_text()
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_thousand_custom_objects_list_and_watch_quickly(widgets):
    emu = widgets.emu.emulator
    rt = emu.registry.get("example.com", "v1", "widgets")
    rv = emu.store.resource_version
    start = time.monotonic()
    for i in range(1000):
        emu.api.create(rt, widgets.ns, {"metadata": {"name": f"w{i}"}, "spec": {"size": 1}})
    listed = widgets.custom.list_namespaced_custom_object(
        "example.com", "v1", widgets.ns, "widgets"
    )
    assert len(listed["items"]) == 1000
    api = widgets.emu.api_client()
    # From "now" (no resourceVersion) the watch starts with 1000 synthetic ADDED events.
    resp = api.call_api(
        "GET",
        f"{widgets.emu.url}/apis/example.com/v1/namespaces/{widgets.ns}/widgets"
        "?watch=true&timeoutSeconds=1",
    )
    assert len(resp.read().splitlines()) == 1000
    # ... while the 200-event history window means the old resourceVersion expired.
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                widgets.custom.list_namespaced_custom_object,
                "example.com",
                "v1",
                widgets.ns,
                "widgets",
                resource_version=str(rv),
                timeout_seconds=1,
            )
        )
    assert err.value.status == 410
    assert time.monotonic() - start < 10


def test_session_emulator_is_shared_and_isolated_by_namespace(kube_emulator_session):
    from kubernetes import client

    core = client.CoreV1Api(kube_emulator_session.api_client())
    ns_a, ns_b = kube_emulator_session.namespace("a"), kube_emulator_session.namespace("b")
    core.create_namespaced_config_map(ns_a, {"metadata": {"name": "same"}})
    core.create_namespaced_config_map(ns_b, {"metadata": {"name": "same"}})
    assert [
        c.metadata.namespace
        for c in core.list_config_map_for_all_namespaces(field_selector="metadata.name=same").items
    ] == [ns_a, ns_b]
