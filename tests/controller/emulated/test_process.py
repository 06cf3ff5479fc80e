"""`longrun controller` as a process: settings, probes, metrics, JSON logs, clean shutdown.

Real: a separate Python process running `controller.runtime.main` (as the CLI wires it)
against the backend over HTTP(S) with a kubeconfig, the node agent. Faked: what pods do
(scripted).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from controller.core.settings import Settings
from controller.runtime import manager as manager_module
from e2e.fixtures import EmulatorHandle, eventually
from e2e.system import System, free_port
from tests.controller.emulated.harness import SUMMARY, Env

LAUNCH = (
    "import argparse, sys\n"
    "from controller.runtime.main import add_parser\n"
    "parser = argparse.ArgumentParser(prog='longrun')\n"
    "add_parser(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.handler(args))\n"
)


def _launch(env: Env, *args: str, **extra_env: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-c",
        LAUNCH,
        "controller",
        "--kubeconfig",
        str(env.kube.kubeconfig_path),
        *args,
    ]
    return subprocess.Popen(
        cmd, env={**os.environ, **extra_env}, stderr=subprocess.PIPE, text=True, cwd=os.getcwd()
    )


def test_bad_setting_exits_2_with_a_clear_message(env: Env) -> None:
    proc = _launch(env, POLLING_INTERVAL="soon")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "POLLING_INTERVAL='soon' is not a duration" in err


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ALLOWED_SERVING_HOSTS", "*.{namespace}", "ALLOWED_SERVING_HOSTS: '*.{namespace}' is"),
        ("SERVING_EGRESS_POLICY", "{cidrs: []}", "(chart: serving.networkPolicy) is not JSON"),
    ],
)  # fmt: skip
def test_a_bad_serving_setting_exits_2_naming_it(
    env: Env, name: str, value: str, message: str
) -> None:
    proc = _launch(env, **{name: value})
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and message in err
    assert "Traceback" not in err


def test_controller_process_serves_probes_metrics_and_stops_cleanly(env: Env) -> None:
    env.scripted.script(exit_code=0, message=SUMMARY)
    metrics, health = free_port(), free_port()
    proc = _launch(
        env,
        "--metrics-port",
        str(metrics),
        "--health-port",
        str(health),
        LEADER_ELECTION="false",
        POLLING_INTERVAL="30s",
        WATCH_NAMESPACES=env.ns,  # a shared real control plane holds other tests' runs
    )
    try:
        eventually(lambda: System.http_get(health, "/readyz")[0] == 200, timeout=20)
        assert System.http_get(health, "/healthz")[0] == 200
        env.create_config()
        env.create_run()
        env.wait_phase("Succeeded")
        text = eventually(
            lambda: (
                'longrun_runs{phase="Succeeded"} 1' in System.http_get(metrics, "/metrics")[1]
                and System.http_get(metrics, "/metrics")[1]
            )
        )
        assert (
            "controller_runtime_reconcile_total" in text and "leader_election_master_status" in text
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(line.get("msg") == "starting" for line in lines)
    # Stopping closes the informers' watches: that is not an error to report.
    assert [line for line in lines if line.get("level") == "error"] == []


@pytest.mark.emulator_only  # a fresh emulator without CRDs (the real session has them)
def test_refuses_to_lead_when_the_caches_cannot_sync(
    kube_emulator: EmulatorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No CRDs installed: listing inferenceruns answers 404 forever.
    monkeypatch.setattr(manager_module, "SYNC_TIMEOUT", 1.0)
    settings = Settings(leader_election=False, polling_interval=30.0)
    manager = manager_module.Manager(kube_emulator.api_client(), settings, identity="lonely")
    try:
        with pytest.raises(manager_module.CacheSyncError, match="RBAC"):
            manager.start()
        assert not manager.is_leader
    finally:
        manager.stop()
