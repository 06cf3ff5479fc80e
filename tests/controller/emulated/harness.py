"""Helpers for controller integration tests on either backend (no pytest fixtures here).

`Env` is one backend (`env.kube`: the API emulator, or a real control plane), a fresh
namespace, official-client APIs, the controllers a test starts, and the scripted pods
(`env.scripted`, e2e/nodeagent/scripted.py) of the node agent that runs that namespace's
pods. What only the emulator has (its clock, fault injection, `restart()`) is reached
through `env.emu`, in tests marked `emulator_only`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes import client

from controller.core.settings import Settings
from controller.runtime.manager import Manager
from e2e.backends import KubeHandle, install_crds
from e2e.fixtures import EmulatorHandle, eventually, scripted_pods_for
from e2e.nodeagent import ScriptedPods

GROUP, VERSION = "longrun.dev", "v1alpha1"
Obj = dict[str, Any]

CONFIG_SPEC: Obj = {
    "image": "ghcr.io/longrun/runner:test",
    "model": {"protocol": "kserve-v2", "url": "http://iris.models:8080", "name": "iris"},
    "storage": {
        "input": {"file": {"path": "/data/in.jsonl"}},
        "output": {"file": {"path": "/data/out"}},
    },
    "backoffLimit": 1,
}
# How long a real control plane gets before a test asserts that nothing more happened.
REAL_SETTLE_SECONDS = 3.0
SUMMARY = '{"recordsRead": 10, "recordsWritten": 9, "recordsFailed": 1, "durationSeconds": 1.5}'


@dataclass
class Env:
    """One backend, one namespace, official-client APIs, and the controllers started on it."""

    kube: KubeHandle
    scripted: ScriptedPods
    ns: str
    custom: Any
    core: Any
    batch: Any
    now: Callable[[], datetime]
    stop_agent: Callable[[], None]  # stops the node agent of its own it has (real backend)
    managers: list[Manager] = field(default_factory=list)

    @classmethod
    def create(cls, kube: KubeHandle, *, workdir: Path) -> Env:
        api = kube.api_client()
        install_crds(api)
        ns = kube.namespace()
        scripted, stop_agent = scripted_pods_for(kube, ns, workdir / "node")
        now = kube.clock.now if isinstance(kube, EmulatorHandle) else _utc_now
        env = cls(
            kube,
            scripted,
            ns,
            client.CustomObjectsApi(api),
            client.CoreV1Api(api),
            client.BatchV1Api(api),
            now,
            stop_agent,
        )
        eventually(
            lambda: (
                env.custom.list_namespaced_custom_object(GROUP, VERSION, env.ns, "inferenceruns")
                is not None
            )
        )
        return env

    @property
    def emu(self) -> EmulatorHandle:
        """The emulator's handle (clock, faults, restart): for `emulator_only` tests."""
        assert isinstance(self.kube, EmulatorHandle), "mark this test emulator_only"
        return self.kube

    def next_minute(self) -> None:
        """Move the emulator's clock to one second past the next whole minute: the tick of a
        `* * * * *` schedule comes at once, and the one after it 59 s of wall time later (the
        clock runs on with the wall; a plain advance(60) from hh:mm:55 let the next tick
        come 5 s later and a test that waited for one execution saw two)."""
        clock = self.emu.clock
        now = clock.now()
        clock.advance_to(now.replace(second=0, microsecond=0) + timedelta(minutes=1, seconds=1))

    def pass_time(self, seconds: float) -> None:
        """Let `seconds` pass for the cluster's controllers: the emulator's clock moves on at
        once; a real control plane's time is the wall clock, so this sleeps."""
        if isinstance(self.kube, EmulatorHandle):
            self.kube.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def settle(self) -> None:
        """Before asserting that nothing more happens: the emulator's controllers have nothing
        queued; a real control plane is given a few seconds (it cannot say it is idle)."""
        if isinstance(self.kube, EmulatorHandle):
            self.kube.emulator.wait_idle()
        else:
            time.sleep(REAL_SETTLE_SECONDS)

    def settings(self, **overrides: Any) -> Settings:
        base = Settings(
            polling_interval=30.0,
            max_reconcile_rate=2,
            leader_election=False,
            leader_election_namespace=self.ns,
            lease_duration=3,
            renew_deadline=2,
            retry_period=1,
        )
        return replace(base, **overrides)

    def start(self, **overrides: Any) -> Manager:
        manager = Manager(
            self.kube.api_client(),
            self.settings(**overrides),
            now=self.now,
            identity=f"test-{len(self.managers)}",
        )
        self.managers.append(manager)
        manager.start()
        return manager

    def close(self) -> None:
        for manager in self.managers:
            manager.stop()
        self.stop_agent()

    # -- objects -------------------------------------------------------------------------------
    def create_config(self, name: str = "cfg", **spec: Any) -> Obj:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceConfig",
            "metadata": {"name": name},
            "spec": {**copy.deepcopy(CONFIG_SPEC), **spec},
        }
        return self.custom.create_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "inferenceconfigs", body
        )

    def patch_config(self, name: str, patch: Obj) -> Obj:
        return self.custom.patch_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "inferenceconfigs", name, patch
        )

    def create_run(self, name: str = "run", config: str = "cfg", **spec: Any) -> Obj:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "InferenceRun",
            "metadata": {"name": name},
            "spec": {"configRef": {"name": config}, **spec},
        }
        return self.custom.create_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "inferenceruns", body
        )

    def patch_run(self, name: str, patch: Obj) -> Obj:
        return self.custom.patch_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "inferenceruns", name, patch
        )

    def run(self, name: str = "run") -> Obj | None:
        try:
            return self.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
                GROUP, VERSION, self.ns, "inferenceruns", name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, name: str = "run") -> Obj:
        return (self.run(name) or {}).get("status") or {}

    def wait_phase(self, phase: str, name: str = "run", timeout: float = 30.0) -> Obj:
        # 30 s: a real control plane on a busy 2-core machine (a compile beside the suite) took
        # over 10 s from a run's creation to its scripted pod's end (the emulator: ~1 s).
        return eventually(
            lambda: self.status(name).get("phase") == phase and self.status(name), timeout=timeout
        )

    def condition(self, type_: str, name: str = "run") -> Obj:
        found = [c for c in self.status(name).get("conditions", []) if c["type"] == type_]
        return found[0] if found else {}

    def _plain(self, items: list[Any]) -> list[Obj]:
        api = client.ApiClient()
        return [api.sanitize_for_serialization(i) for i in items]

    def jobs(self) -> list[Obj]:
        return self._plain(self.batch.list_namespaced_job(self.ns).items)

    def cron_jobs(self) -> list[Obj]:
        return self._plain(self.batch.list_namespaced_cron_job(self.ns).items)

    def config_maps(self) -> list[Obj]:
        cms = self._plain(self.core.list_namespaced_config_map(self.ns).items)
        return [c for c in cms if c["metadata"]["name"] != "kube-root-ca.crt"]

    def config_map(self, name: str) -> Obj:
        return next(c for c in self.config_maps() if c["metadata"]["name"] == name)

    def pods(self) -> list[Obj]:
        return self._plain(self.core.list_namespaced_pod(self.ns).items)

    def events(self) -> list[Obj]:
        return self._plain(self.core.list_namespaced_event(self.ns).items)


def _utc_now() -> datetime:
    return datetime.now(UTC)
