"""Plain objects for the fleet decision's tests: hosts, InferenceModels, health, protocols."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from controller.core.fleets.health import HostHealth, OpState, ProtocolInfo

NS = "fleet"
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
Obj = dict[str, Any]


def ollama_name(name: str) -> str:
    return name if ":" in name else f"{name}:latest"


PROTOCOLS = {
    "openai": ProtocolInfo("openai", can_load=False),
    "ollama": ProtocolInfo("ollama", can_load=True, normalize=ollama_name),
}


def host(
    name: str,
    *,
    address: str = "",
    labels: dict[str, str] | None = None,
    protocol: str = "openai",
    slots: int | None = 1,
    memory: str | None = None,
    assignments: list[Obj] | None = None,
    **spec: Any,
) -> Obj:
    capacity = {k: v for k, v in (("slots", slots), ("memory", memory)) if v is not None}
    status: Obj = {"assignments": assignments} if assignments else {}
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceHost",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "generation": 1,
            "labels": {"pool": "a"} if labels is None else labels,
        },
        "spec": {
            "endpoint": f"http://{address or '10.0.0.1'}:8080",
            "adminProtocol": protocol,
            "capacity": capacity,
            **spec,
        },
        "status": status,
    }


def model(name: str, *, replicas: int = 2, model_name: str = "tiny", **spec: Any) -> Obj:
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceModel",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1},
        "spec": {
            "model": model_name,
            "replicas": replicas,
            "hostSelector": {"matchLabels": {"pool": "a"}},
            **spec,
        },
    }


def assignment(model_name: str, name: str = "tiny", *, slots: int = 1) -> Obj:
    return {"inferenceModel": name, "modelName": model_name, "slots": slots,
            "since": "2026-05-01T11:00:00Z"}  # fmt: skip


def healthy(address: str, *models: str) -> HostHealth:
    return HostHealth(checked=True, ready=True, address=address, port=8080, models=models,
                      last_seen=NOW)  # fmt: skip


def failing(address: str, failures: int = 3) -> HostHealth:
    return HostHealth(checked=True, ready=False, address=address, port=8080, failures=failures,
                      last_error="GET /v1/models: connection refused")  # fmt: skip


def done(kind: str = "load") -> OpState:
    return OpState(kind, "done", at=NOW)  # type: ignore[arg-type]
