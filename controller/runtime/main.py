"""`longrun controller`: start the controller from environment variables and flags.

Flags override the environment (the chart sets only environment variables). A
bad setting exits with status 2 and a message naming it, before any thread or
connection starts. Losing leadership exits with status 1 so the Deployment
restarts the pod as a follower, as controller-runtime does.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

from controller.core.fleets.settings import fleet_settings_from_env
from controller.core.serving.settings import serving_settings_from_env
from controller.core.settings import Settings, SettingsError, settings_from_env
from controller.runtime import logs
from controller.runtime.serve import Endpoint, Route, probe

log = logging.getLogger("controller")
FLAGS = {
    "polling_interval": "POLLING_INTERVAL",
    "progress_interval": "PROGRESS_INTERVAL",
    "max_reconcile_rate": "MAX_RECONCILE_RATE",
    "watch_namespaces": "WATCH_NAMESPACES",
    "default_runner_image": "DEFAULT_RUNNER_IMAGE",
    "allowed_images": "ALLOWED_IMAGES",
    "allowed_service_accounts": "ALLOWED_SERVICE_ACCOUNTS",
    "runner_service_account": "RUNNER_SERVICE_ACCOUNT",
    "leader_election": "LEADER_ELECTION",
    "leader_election_namespace": "LEADER_ELECTION_NAMESPACE",
    "lease_name": "LEASE_NAME",
    "log_level": "LOG_LEVEL",
    "log_format": "LOG_FORMAT",
    "metrics_port": "METRICS_PORT",
    "health_port": "HEALTH_PORT",
    "metrics_bind_address": "METRICS_BIND_ADDRESS",
    "health_bind_address": "HEALTH_BIND_ADDRESS",
    "fleet_health_interval": "FLEET_HEALTH_INTERVAL",
    "fleet_failure_threshold": "FLEET_FAILURE_THRESHOLD",
    "fleet_request_timeout": "FLEET_REQUEST_TIMEOUT",
    "fleet_load_timeout": "FLEET_LOAD_TIMEOUT",
    "fleet_allowed_cidrs": "FLEET_ALLOWED_CIDRS",
    "fleet_host_credentials": "FLEET_HOST_CREDENTIALS",
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the `controller` subcommand to the `longrun` CLI; its handler is `run`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "controller",
        help="run the InferenceRun controller",
        description="Run the controller (kubeconfig or in-cluster). Flags override env vars.",
    )
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    parser.add_argument("--context", default=None, help="kubeconfig context")
    for dest, env in FLAGS.items():
        flag = "--" + dest.replace("_", "-")
        parser.add_argument(flag, dest=dest, default=None, metavar=env, help=f"overrides ${env}")
    parser.set_defaults(handler=run)
    return parser


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the environment with flags applied on top."""
    return settings_from_env(_environment(args))


def _environment(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    for dest, name in FLAGS.items():
        value = getattr(args, dest, None)
        if value is not None:
            env[name] = str(value)
    return env


def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT (0) or lost leadership (1); 2 for a bad setting."""
    try:
        settings = settings_from_args(args)
        serving = serving_settings_from_env()  # read up front: a bad one stops the start
        fleet = fleet_settings_from_env(_environment(args))
    except SettingsError as exc:
        print(f"longrun controller: {exc}", file=sys.stderr)
        return 2
    logs.configure(level=settings.log_level, fmt=settings.log_format)
    for warning in loopback_warnings(settings, os.environ):
        log.warning("%s", warning)
    from controller.runtime.manager import CacheSyncError, Manager

    api_client = connect(args.kubeconfig, context=args.context)
    if api_client is None:
        return 2
    identity = f"{socket.gethostname()}_{os.getpid()}"
    manager = Manager(
        api_client, settings, identity=identity, serving_settings=serving, fleet_settings=fleet
    )
    done = threading.Event()
    exit_code = [0]

    def lost() -> None:
        exit_code[0] = 1
        done.set()

    manager.on_lost_leadership = lost
    metrics, health = _endpoints(manager, settings)
    for endpoint in (metrics, health):
        endpoint.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    log.info("starting", extra={"identity": manager.identity})
    try:
        manager.start()
    except CacheSyncError as exc:
        log.error("%s", exc)
        exit_code[0] = 1
        done.set()
    done.wait()
    manager.stop()
    for endpoint in (metrics, health):
        endpoint.stop()
    return exit_code[0]


def kubeconfig_problem(kubeconfig: str | None) -> str | None:
    """Why --kubeconfig (or $KUBECONFIG, a list of paths) cannot be used: none of it exists."""
    if not kubeconfig:
        return None
    paths = [p for p in kubeconfig.split(os.pathsep) if p]
    if paths and not any(os.path.isfile(p) for p in paths):
        return f"--kubeconfig {kubeconfig}: no such file"
    return None


def connect(kubeconfig: str | None, *, context: str | None) -> Any | None:
    """The API client; None after printing one line when the kubeconfig cannot be loaded."""
    from controller.kube import load_api_client  # the kubernetes client loads lazily

    problem = kubeconfig_problem(kubeconfig)
    if problem is None:
        try:
            return load_api_client(kubeconfig, context=context)
        except Exception as exc:  # the client's ConfigException, or a file it cannot parse
            where = f"kubeconfig {kubeconfig}" if kubeconfig else "no kubeconfig and not in a pod"
            text = " ".join(str(exc).split()) or type(exc).__name__
            problem = f"{where}: {text}"
    print(f"longrun controller: {problem}", file=sys.stderr)
    return None


def loopback_warnings(settings: Settings, env: Mapping[str, str]) -> list[str]:
    """What a pod cannot reach: endpoints on loopback while running in a cluster."""
    if not env.get("KUBERNETES_SERVICE_HOST"):
        return []  # started by hand: loopback is the safe default
    bound = {"HEALTH_BIND_ADDRESS": (settings.health_bind_address, "the kubelet's probes"),
             "METRICS_BIND_ADDRESS": (settings.metrics_bind_address, "Prometheus")}  # fmt: skip
    return [
        f"{name}={address} is a loopback address: {who} cannot reach it through the pod IP; "
        f"set {name}=0.0.0.0 (the chart does)"
        for name, (address, who) in bound.items()
        if ipaddress.ip_address(address).is_loopback
    ]


def _endpoints(manager: Any, settings: Settings) -> tuple[Endpoint, Endpoint]:
    """/metrics and the probes, each on its own port and address."""
    metrics = Endpoint(
        settings.metrics_port,
        {"/metrics": metrics_route(manager)},
        host=settings.metrics_bind_address,
    )
    health = Endpoint(
        settings.health_port,
        {"/healthz": probe(lambda: True), "/readyz": probe(manager.is_ready)},
        host=settings.health_bind_address,
    )
    return metrics, health


def metrics_route(manager: Any) -> Route:
    """/metrics: the manager's metrics, with the runs per phase counted at scrape time."""
    from controller.runtime.metrics import CONTENT_TYPE

    def route() -> tuple[int, str, str]:
        manager.metrics.runs.replace(
            {k: float(v) for k, v in manager.cluster.phase_counts().items()}, label="phase"
        )
        return 200, CONTENT_TYPE, manager.metrics.render()

    return route
