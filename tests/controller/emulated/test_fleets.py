"""External hosts through the whole controller, on either backend: placement and loading on
an Ollama host, unloading when no longer wanted, credentials and the network guard.

Real: the backend of LONGRUN_KUBE_BACKEND (the emulator, or kube-apiserver, etcd and
kube-controller-manager), the official client, the whole controller (its fleet adapter,
reconciler and host prober) in-process, and HTTP to stand-in daemons, each in a network
namespace with an address of 198.18.0.0/15 (e2e/netns.py). The stand-ins answer as
Ollama's and inferenced's public API documents say (tests/controller/hosts/standins.py):
no real Ollama or inferenced runs here. Faked: nothing else. Skips with one line where
namespaces cannot be made (not root); fails instead in CI.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controller.core.fleets.settings import FleetSettings
from controller.runtime.manager import Manager
from e2e.fixtures import eventually
from tests.controller.emulated.harness import GROUP, VERSION, Env
from tests.controller.hosts.spaces import StandIn, stand_in

pytestmark = pytest.mark.requires_service  # network namespaces (root), stand-ins
FLEET = FleetSettings(health_interval=0.5, failure_threshold=2, request_timeout=2)
Obj = dict[str, Any]


def start(env: Env, fleet: FleetSettings = FLEET, **overrides: Any) -> Manager:
    manager = Manager(
        env.kube.api_client(), env.settings(**overrides), now=env.now,
        identity=f"fleet-{len(env.managers)}", fleet_settings=fleet,
    )  # fmt: skip
    env.managers.append(manager)
    manager.start()
    return manager


def create(
    env: Env, plural: str, kind: str, name: str, spec: Obj, labels: Obj | None = None
) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}  # fmt: skip
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, plural, body)


def get(env: Env, plural: str, name: str) -> Obj:
    obj: Obj = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, plural, name)
    return obj


def host(env: Env, daemon: StandIn, name: str = "gpu-1", **spec: Any) -> None:
    body = {"endpoint": daemon.endpoint, "adminProtocol": "ollama", "capacity": {"slots": 2}}
    create(env, "inferencehosts", "InferenceHost", name, body | spec, {"pool": "gpu"})


def model(env: Env, name: str = "qwen", replicas: int = 1, model_name: str = "qwen2.5:3b") -> None:
    spec = {
        "model": model_name,
        "replicas": replicas,
        "hostSelector": {"matchLabels": {"pool": "gpu"}},
    }
    create(env, "inferencemodels", "InferenceModel", name, spec)


def slice_addresses(env: Env, name: str = "qwen") -> list[tuple[str, bool]]:
    api = client.DiscoveryV1Api(env.kube.api_client())
    items = api.list_namespaced_endpoint_slice(
        env.ns, label_selector=f"kubernetes.io/service-name={name}"
    ).items
    return [(e.addresses[0], bool(e.conditions.ready)) for s in items for e in s.endpoints or []]


def condition(obj: Obj, type_: str = "Ready") -> Obj:
    return next(
        (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {}
    )


def test_an_ollama_host_loads_the_model_and_unloads_it_when_no_longer_wanted(
    env: Env, tmp_path: Path
) -> None:
    with stand_in(20, "ollama", library=["qwen2.5:3b"], workdir=tmp_path) as ollama:
        start(env)
        host(env, ollama)
        model(env)

        status = eventually(
            lambda: (
                (s := get(env, "inferencemodels", "qwen").get("status") or {})
                and s.get("readyReplicas") == 1
                and s
            ),
            timeout=30,
        )

        assert status["placements"][0]["host"] == "gpu-1"
        assert slice_addresses(env) == [(ollama.space.address, True)]
        assert get(env, "inferencehosts", "gpu-1")["status"]["models"] == ["qwen2.5:3b"]
        env.custom.patch_namespaced_custom_object(
            GROUP, VERSION, env.ns, "inferencemodels", "qwen", {"spec": {"replicas": 0}}
        )

        eventually(
            lambda: get(env, "inferencehosts", "gpu-1")["status"].get("models") in ([], None),
            timeout=30,
        )

        assert slice_addresses(env) == []
        assert not get(env, "inferencehosts", "gpu-1")["status"].get("assignments")
        calls = [r["path"] for r in ollama.requests() if r["method"] == "POST"]
    assert calls == ["/api/pull", "/api/generate", "/api/generate"]  # pull, load, unload


def secret(env: Env, name: str, *, labelled: bool) -> None:
    labels = {"longrun.dev/host-credentials": "true"} if labelled else {}
    env.core.create_namespaced_secret(env.ns, {
        "metadata": {"name": name, "labels": labels},
        "data": {"token": base64.b64encode(b"s3cret").decode()},
    })  # fmt: skip


def test_a_labelled_secret_is_sent_to_its_host_when_the_chart_allows_it(
    env: Env, tmp_path: Path
) -> None:
    name = "mlx-community/Qwen2.5-3B-Instruct-4bit"
    with stand_in(21, "inferenced", library=[name], workdir=tmp_path, token="s3cret") as daemon:
        start(env, replace(FLEET, host_credentials=True))
        secret(env, "admin", labelled=True)
        host(env, daemon, adminProtocol="inferenced", credentials={"name": "admin"})
        model(env, model_name=name)

        eventually(
            lambda: (
                (get(env, "inferencemodels", "qwen").get("status") or {}).get("readyReplicas") == 1
            ),
            timeout=30,
        )

        admin = [r for r in daemon.requests() if r["path"].startswith("/admin/")]
    assert admin and all(r["token"] for r in admin)


def test_credentials_are_not_read_unless_allowed_and_not_sent_unless_labelled(
    env: Env, tmp_path: Path
) -> None:
    with stand_in(22, "ollama", library=["qwen2.5:3b"], workdir=tmp_path) as ollama:
        start(env, replace(FLEET, host_credentials=True))
        secret(env, "not-for-hosts", labelled=False)
        host(env, ollama, credentials={"name": "not-for-hosts"})

        ready = eventually(lambda: condition(get(env, "inferencehosts", "gpu-1")), timeout=30)

        assert ready["reason"] == "CredentialsNotLabelled", ready
        assert "lacks the label longrun.dev/host-credentials" in ready["message"]
        assert ollama.requests() == []  # a host whose token is refused is not called at all


def test_a_controller_not_allowed_secrets_says_so_and_reads_none(env: Env, tmp_path: Path) -> None:
    with stand_in(23, "ollama", library=[], workdir=tmp_path) as ollama:
        start(env)
        host(env, ollama, credentials={"name": "whatever"})

        ready = eventually(lambda: condition(get(env, "inferencehosts", "gpu-1")), timeout=30)

        assert ready["reason"] == "CredentialsNotAllowed", ready
        assert "fleets.hostCredentials" in ready["message"]
        assert ollama.requests() == []


def test_a_host_in_a_denied_network_is_never_called_nor_published(env: Env, tmp_path: Path) -> None:
    with stand_in(24, "ollama", library=["qwen2.5:3b"], workdir=tmp_path) as ollama:
        start(env, denied_cidrs=("198.18.0.0/15",))
        host(env, ollama)
        model(env)

        ready = eventually(
            lambda: (
                (c := condition(get(env, "inferencehosts", "gpu-1"))).get("reason")
                == "AddressNotAllowed"
                and c
            ),
            timeout=30,
        )

        assert "DENIED_CIDRS" in ready["message"], ready
        assert ollama.requests() == []
        model_status = eventually(lambda: get(env, "inferencemodels", "qwen").get("status"))
        assert model_status["phase"] == "Pending" and model_status["readyReplicas"] == 0
        assert slice_addresses(env) == []
