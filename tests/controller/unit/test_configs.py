"""An InferenceConfig's own status, decided from plain data and written through an
in-memory recording cluster (tests/controller/unit/fakes.py). Faked: the API and the clock."""

from __future__ import annotations

from datetime import UTC, datetime

from controller.core.configs import config_status
from controller.core.settings import Settings
from controller.reconcile.configs import ConfigReconciler
from tests.controller.unit.fakes import FakeCluster
from tests.controller.unit.objects import NS, config

NOW = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
ENDPOINT = {"name": "db", "namespace": "other"}
FOREIGN_SECRET = {
    "input": {"krateo": {"api": {"path": "/in", "verb": "GET", "endpointRef": ENDPOINT}}},
    "output": {"file": {"path": "/out"}},
}


def accepted(status: dict) -> tuple[str, str]:  # type: ignore[type-arg]
    cond = next(c for c in status["conditions"] if c["type"] == "Accepted")
    return cond["status"], cond["reason"]


def test_usable_config_is_accepted_at_its_generation() -> None:
    status = config_status(config(), Settings(), now=NOW).to_wire()
    assert accepted(status) == ("True", "Accepted") and status["observedGeneration"] == 1


def test_secret_in_another_namespace_is_refused_on_the_config_itself() -> None:
    status = config_status(config(storage=FOREIGN_SECRET), Settings(), now=NOW).to_wire()
    assert accepted(status) == ("False", "SecretInOtherNamespace")


def test_image_outside_the_allow_list_is_refused() -> None:
    settings = Settings(allowed_images=("registry.example/*",))
    assert accepted(config_status(config(), settings, now=NOW).to_wire())[1] == "ImageNotAllowed"


def test_unreadable_spec_names_the_field() -> None:
    status = config_status(config(backoffLimit=-1), Settings(), now=NOW).to_wire()
    assert accepted(status)[1] == "InvalidConfig"
    assert status["conditions"][0]["message"].startswith("spec: backoffLimit")


def test_reconciler_writes_the_status_once_with_a_warning_event() -> None:
    cluster = FakeCluster()
    cluster.put("InferenceConfig", config(storage=FOREIGN_SECRET))
    reconciler = ConfigReconciler(cluster, Settings(), now=lambda: NOW)
    reconciler.reconcile(f"{NS}/cfg")
    reconciler.reconcile(f"{NS}/cfg")  # nothing changed: nothing written
    assert cluster.writes() == [
        ("patch_status", "InferenceConfig", "cfg"),
        ("event", "SecretInOtherNamespace", "cfg"),
    ]
    stored = cluster.get("InferenceConfig", NS, "cfg") or {}
    assert accepted(stored["status"]) == ("False", "SecretInOtherNamespace")
