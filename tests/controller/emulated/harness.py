"""Helpers for controller integration tests on the API emulator (no pytest fixtures here)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client

from controller.core.settings import Settings
from controller.crds import generate_crds
from controller.runtime.manager import Manager
from e2e.fixtures import EmulatorHandle, eventually

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
SUMMARY = '{"recordsRead": 10, "recordsWritten": 9, "recordsFailed": 1, "durationSeconds": 1.5}'


@dataclass
class Env:
    """One emulator, one namespace, official-client APIs, and the controllers started on it."""

    emu: EmulatorHandle
    ns: str
    custom: Any
    core: Any
    batch: Any
    managers: list[Manager] = field(default_factory=list)

    @classmethod
    def create(cls, emu: EmulatorHandle) -> Env:
        api = emu.api_client()
        ext = client.ApiextensionsV1Api(api)
        for crd in generate_crds():
            ext.create_custom_resource_definition(crd)
        env = cls(
            emu,
            emu.namespace(),
            client.CustomObjectsApi(api),
            client.CoreV1Api(api),
            client.BatchV1Api(api),
        )
        eventually(
            lambda: (
                env.custom.list_namespaced_custom_object(GROUP, VERSION, env.ns, "inferenceruns")
                is not None
            )
        )
        return env

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
            self.emu.api_client(),
            self.settings(**overrides),
            now=self.emu.clock.now,
            identity=f"test-{len(self.managers)}",
        )
        self.managers.append(manager)
        manager.start()
        return manager

    def close(self) -> None:
        for manager in self.managers:
            manager.stop()

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

    def wait_phase(self, phase: str, name: str = "run", timeout: float = 10.0) -> Obj:
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
