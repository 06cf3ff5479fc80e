"""The fleet reconciler's settings (chart values `fleets.*`), read once at start-up.

`DENIED_CIDRS` is the runners' setting (controller/core/settings.py): a network runner pods
may not reach is one the controller does not call on a tenant's behalf either.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from controller.core.settings import parse_bool, parse_cidrs, parse_duration, parse_int


@dataclass(frozen=True)
class FleetSettings:
    """What the fleet reconciler and the host prober read from the environment."""

    health_interval: float = 15.0  # FLEET_HEALTH_INTERVAL: seconds between two checks of a host
    failure_threshold: int = 3  # FLEET_FAILURE_THRESHOLD: failed checks before NotReady
    request_timeout: float = 5.0  # FLEET_REQUEST_TIMEOUT: one health check or list call
    load_timeout: float = 900.0  # FLEET_LOAD_TIMEOUT: one load (a pull may take minutes)
    denied_cidrs: tuple[str, ...] = ()  # DENIED_CIDRS
    allowed_cidrs: tuple[str, ...] = ()  # FLEET_ALLOWED_CIDRS (empty: anywhere not denied)
    host_credentials: bool = False  # FLEET_HOST_CREDENTIALS: may read hosts' token Secrets
    cluster_domain: str = "cluster.local"  # CLUSTER_DOMAIN
    last_seen_refresh: float = 60.0  # status.lastSeen is rewritten at most this often

    def with_denied(self, cidrs: tuple[str, ...]) -> FleetSettings:
        """These settings with `denied_cidrs` set (the run controller's DENIED_CIDRS)."""
        return FleetSettings(**{**vars(self), "denied_cidrs": cidrs})


def fleet_settings_from_env(env: Mapping[str, str] | None = None) -> FleetSettings:
    """Settings from environment variables; raises SettingsError naming a bad one."""
    env = os.environ if env is None else env
    get = env.get
    return FleetSettings(
        health_interval=parse_duration(
            get("FLEET_HEALTH_INTERVAL", "15s"), name="FLEET_HEALTH_INTERVAL"
        ),
        failure_threshold=parse_int(
            get("FLEET_FAILURE_THRESHOLD", "3"), name="FLEET_FAILURE_THRESHOLD"
        ),
        request_timeout=parse_duration(
            get("FLEET_REQUEST_TIMEOUT", "5s"), name="FLEET_REQUEST_TIMEOUT"
        ),
        load_timeout=parse_duration(get("FLEET_LOAD_TIMEOUT", "15m"), name="FLEET_LOAD_TIMEOUT"),
        denied_cidrs=parse_cidrs(get("DENIED_CIDRS", ""), name="DENIED_CIDRS"),
        allowed_cidrs=parse_cidrs(get("FLEET_ALLOWED_CIDRS", ""), name="FLEET_ALLOWED_CIDRS"),
        host_credentials=parse_bool(
            get("FLEET_HOST_CREDENTIALS", "false"), name="FLEET_HOST_CREDENTIALS"
        ),
        cluster_domain=get("CLUSTER_DOMAIN") or "cluster.local",
    )
