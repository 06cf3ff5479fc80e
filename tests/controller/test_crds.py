"""The generated CRDs: current, structural, and shaped the way users expect.

Real: the generator, the committed files in charts/longrun/crds, the structural-schema
rules re-implemented in tests/controller/structural.py from the Kubernetes docs.
Faked: nothing. (The CRDs are also applied to the API emulator by the controller tests.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.run import (
    CANCEL_FINAL_MESSAGE,
    CANCEL_FINAL_RULE,
    CANCEL_ONE_SHOT_MESSAGE,
    CANCEL_ONE_SHOT_RULE,
    ONE_SHOT_FIXED_FIELDS,
    ONE_SHOT_FIXED_MESSAGE,
    ONE_SHOT_FIXED_RULE,
    ONE_SHOT_MUTABLE,
)
from controller.crds import CRD_DIR, crd_files, generate_crds
from tests.controller.structural import preserve_unknown_paths, violations

ROOT = Path(__file__).resolve().parents[2]
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in generate_crds()}


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crds_are_byte_identical_to_generated() -> None:
    committed = {p.name: p.read_text() for p in (ROOT / CRD_DIR).glob("*.yaml")}
    assert committed == crd_files()


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_schema_is_structural(kind: str) -> None:
    assert violations(_schema(kind)) == []


def test_checker_catches_untyped_and_ref_nodes() -> None:
    bad = {"type": "object", "properties": {"a": {"$ref": "#/x"}, "b": {"description": "?"}}}
    found = violations(bad)
    assert any("unknown keyword '$ref'" in v for v in found)
    assert any("needs a type" in v for v in found)


def test_unknown_fields_are_kept_only_for_storage_pass_through() -> None:
    paths = preserve_unknown_paths(_schema("InferenceConfig"))
    storage = {f".spec.storage.{d}" for d in ("input", "output", "errors")}
    http_bodies = {f"{s}.http.body" for s in storage}
    # An OpenAI request body: any parameter the endpoint takes (docs/llm-batch.md).
    assert set(paths) == storage | http_bodies | {".spec.model.body"}
    assert preserve_unknown_paths(_schema("InferenceRun")) == []


@pytest.mark.parametrize("kind,short", [("InferenceConfig", "icfg"), ("InferenceRun", "irun")])
def test_names_scope_and_status_subresource(kind: str, short: str) -> None:
    spec = CRDS[kind]["spec"]
    assert spec["group"] == "longrun.dev" and spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == [short]
    assert spec["names"]["categories"] == ["longrun"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}


def test_run_printer_columns() -> None:
    columns = CRDS["InferenceRun"]["spec"]["versions"][0]["additionalPrinterColumns"]
    names = [c["name"] for c in columns if c.get("priority", 0) == 0]
    assert names == ["Phase", "Progress", "Rate", "ETA", "Last Run", "Next Run", "Age"]
    wide = [c["name"] for c in columns if c.get("priority", 0) == 1]
    assert wide == ["Tokens/s", "Config", "Schedule", "Message"]


def test_next_run_is_a_string_column_since_kubectl_prints_future_dates_as_invalid() -> None:
    columns = CRDS["InferenceRun"]["spec"]["versions"][0]["additionalPrinterColumns"]
    by_name = {c["name"]: c for c in columns}
    assert by_name["Next Run"] == {
        "name": "Next Run",
        "type": "string",
        "jsonPath": ".status.nextScheduleTime",
    }
    assert by_name["Last Run"]["type"] == "date"  # a past time: kubectl prints its age
    assert by_name["Progress"]["jsonPath"] == ".status.progress.text"


def test_one_shot_run_spec_is_immutable_but_for_suspend_and_cancel_by_cel_rule() -> None:
    rules = {r["rule"]: r["message"] for r in _schema("InferenceRun")["properties"]["spec"][
        "x-kubernetes-validations"]}  # fmt: skip
    assert rules[ONE_SHOT_FIXED_RULE] == ONE_SHOT_FIXED_MESSAGE
    assert "immutable" in ONE_SHOT_FIXED_MESSAGE
    fields = set(_schema("InferenceRun")["properties"]["spec"]["properties"])
    # Every field but suspend and cancel is fixed: a new spec field must join the list.
    assert set(ONE_SHOT_FIXED_FIELDS) == fields - set(ONE_SHOT_MUTABLE)
    assert all(f"self.{f} == oldSelf.{f}" in ONE_SHOT_FIXED_RULE for f in ONE_SHOT_FIXED_FIELDS)
    assert "suspend" not in ONE_SHOT_FIXED_RULE and "cancel" not in ONE_SHOT_FIXED_RULE
    assert rules[CANCEL_FINAL_RULE] == CANCEL_FINAL_MESSAGE
    assert rules[CANCEL_ONE_SHOT_RULE] == CANCEL_ONE_SHOT_MESSAGE


def test_validation_keywords_reach_the_crd() -> None:
    spec = _schema("InferenceRun")["properties"]["spec"]["properties"]
    assert spec["timeoutSeconds"]["minimum"] == 1
    assert spec["concurrencyPolicy"] == {
        "default": "Forbid",
        "description": spec["concurrencyPolicy"]["description"],
        "enum": ["Allow", "Forbid", "Replace"],
        "type": "string",
    }
    config = _schema("InferenceConfig")["properties"]["spec"]
    assert config["properties"]["runner"]["default"] == {}
    assert config["x-kubernetes-validations"][0]["rule"] == "has(self.model) != has(self.kserve)"


def test_every_property_has_a_description() -> None:
    def walk(node: dict[str, Any], path: str) -> list[str]:
        missing = []
        for name, sub in node.get("properties", {}).items():
            if not sub.get("description") and name not in ("metadata",):
                missing.append(f"{path}.{name}")
            missing += walk(sub, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            missing += walk(node["items"], f"{path}[]")
        return missing

    for kind in CRDS:
        assert walk(_schema(kind), kind) == []


def test_committed_files_parse_as_single_documents() -> None:
    for path in (ROOT / CRD_DIR).glob("*.yaml"):
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"
