"""The model catalog in the chart: its ConfigMap, the controller's settings, the sync CronJob.

Real: Helm's template engine on the chart (helm-python-sdk), the chart's values.schema.json,
the catalog schema the controller uses (contracts/serving/catalog.py) and the CLI's table.
Faked: no cluster is contacted (offline render); the sync job itself is tested in
tests/controller/test_catalog_cli.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import helm_python
import pytest
import yaml

from contracts.serving import parse_catalog
from controller.catalog import catalog_rows
from tests.charts.test_chart import CHART, _render

SYNC = {"catalog": {"sync": {"enabled": True, "url": "https://models.example.com/catalog.yaml"}}}


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    loaded = helm_python.Chart.load(str(CHART))
    yield loaded
    loaded.close()


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _env(docs: list[dict[str, Any]]) -> dict[str, str]:
    deployment = _one(docs, "Deployment", "lr-longrun")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_starter_catalog_is_valid_and_covers_the_shipped_runtimes(chart: Any) -> None:
    config_map = _one(_render(chart), "ConfigMap", "lr-longrun-model-catalog")
    catalog = parse_catalog(yaml.safe_load(config_map["data"]["catalog.yaml"]))
    formats = {row[3] for row in catalog_rows(catalog)}
    assert {"gguf", "hf", "sklearn"} <= formats
    assert {row[2] for row in catalog_rows(catalog)} == {"cpu", "gpu"}


def test_controller_reads_the_catalog_with_lazy_registration_by_default(chart: Any) -> None:
    env = _env(_render(chart))
    assert env["SERVING_CATALOG"] == "longrun-system/lr-longrun-model-catalog"
    assert env["SERVING_CATALOG_LAZY"] == "true"


def test_catalog_off_installs_no_config_map_and_no_catalog(chart: Any) -> None:
    docs = _render(chart, {"catalog": {"enabled": False}})
    assert not [d for d in docs if d["metadata"]["name"].endswith("model-catalog")]
    assert _env(docs)["SERVING_CATALOG"] == ""


def test_lazy_registration_can_be_switched_off(chart: Any) -> None:
    env = _env(_render(chart, {"catalog": {"lazyRegistration": False}}))
    assert env["SERVING_CATALOG_LAZY"] == "false"


def test_no_sync_job_unless_asked(chart: Any) -> None:
    assert not [d for d in _render(chart) if d["kind"] == "CronJob"]


def test_sync_job_runs_the_sync_command_with_a_role_on_one_config_map(chart: Any) -> None:
    docs = _render(chart, SYNC)
    job = _one(docs, "CronJob", "lr-longrun-catalog-sync")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == [
        "catalog",
        "sync",
        "--url",
        "https://models.example.com/catalog.yaml",
        "--configmap",
        "longrun-system/lr-longrun-model-catalog",
    ]
    assert pod["serviceAccountName"] == "lr-longrun-catalog-sync"
    role = _one(docs, "Role", "lr-longrun-catalog-sync")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["lr-longrun-model-catalog"],
            "verbs": ["get", "patch"],
        }
    ]


def test_sync_without_url_fails_the_render_naming_the_value(chart: Any) -> None:
    with pytest.raises(Exception, match=r"catalog\.sync\.url"):
        _render(chart, {"catalog": {"sync": {"enabled": True}}})


def test_watched_namespaces_get_a_role_reading_only_the_catalog(chart: Any) -> None:
    docs = _render(chart, {"controller": {"watchNamespaces": ["team-a"]}})
    role = _one(docs, "Role", "lr-longrun-catalog-reader")
    assert role["metadata"]["namespace"] == "longrun-system"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["lr-longrun-model-catalog"],
            "verbs": ["get"],
        }
    ]
