"""The runner contract v1: golden files, JSON Schema, Krateo compatibility, summaries.

Real: the models, the committed JSON Schema file, the golden contracts in
testdata/contracts (which the controller must produce and the runner must accept),
and the `jsonschema` validator. Faked: nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from contracts.contract import RunnerContract, contract_json_schema, summary_json
from contracts.run import RunResult

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((ROOT / "testdata" / "contracts").glob("*.json"))
KRATEO_KEYS = {"jobId", "jobName", "kserve", "input", "output", "parameters"}


def test_committed_schema_matches_models() -> None:
    committed = json.loads((ROOT / "contracts" / "contract-v1.schema.json").read_text())
    assert committed == contract_json_schema()


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_contract_is_valid_against_json_schema(path: Path) -> None:
    jsonschema.validate(json.loads(path.read_text()), contract_json_schema())


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_contract_round_trips_deterministically(path: Path) -> None:
    text = path.read_text()
    assert RunnerContract.model_validate_json(text).to_json() == text


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_contract_keeps_krateo_keys(path: Path) -> None:
    doc = json.loads(path.read_text())
    assert doc.keys() >= KRATEO_KEYS - {"kserve"}
    if doc["model"]["protocol"].startswith("kserve"):
        assert "kserve" in doc


def test_contract_ignores_unknown_top_level_keys() -> None:
    doc = json.loads(GOLDEN[0].read_text()) | {"addedInV1_1": True}
    assert RunnerContract.model_validate(doc).to_json() == GOLDEN[0].read_text()


def test_summary_with_long_locations_stays_under_four_kilobytes() -> None:
    result = RunResult(
        records_written=7,
        output="s3://bucket/" + "p" * 2000,
        error_output="s3://bucket/" + "é" * 2000,
        reason="r" * 1000,
    )
    text = summary_json(result)
    assert len(text.encode()) <= 4096
    wire = json.loads(text)
    assert wire["recordsWritten"] == 7 and wire["output"].startswith("s3://bucket/ppp")


def test_summary_stays_under_four_kilobytes() -> None:
    result = RunResult(records_read=10, records_failed=10, reason="x" * 1000)
    text = summary_json(result)
    assert len(text.encode()) <= 4096
    assert json.loads(text)["recordsFailed"] == 10
