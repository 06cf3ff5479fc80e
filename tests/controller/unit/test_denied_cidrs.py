"""DENIED_CIDRS: read and checked at start-up, rendered into the contract the runner enforces
(runners/netguard.py), and absent from the contract when unset, so contracts rendered
before it existed stay byte for byte the same. Nothing is faked: pure functions only.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec, InferenceRunStatus
from controller.core import builders, names
from controller.core.builders import ObjectIdentity, Resolved
from controller.core.decide import Create, decide
from controller.core.settings import Settings, SettingsError, settings_from_env
from controller.core.status import Observed
from tests.controller.unit.objects import config, resolved, run

ROOT = Path(__file__).resolve().parents[3]
CHART_DEFAULT = "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32"


def contract_of(config_map: dict[str, Any]) -> dict[str, Any]:
    return json.loads(config_map["data"][names.CONTRACT_KEY])  # type: ignore[no-any-return]


def test_denied_cidrs_are_read_canonical_and_deduplicated() -> None:
    settings = settings_from_env({"DENIED_CIDRS": f" {CHART_DEFAULT}, 10.1.2.3 ,FE80::/10"})
    assert settings.denied_cidrs == (
        "169.254.0.0/16",
        "fe80::/10",
        "fd00:ec2::254/128",
        "100.100.100.200/32",
        "10.1.2.3/32",
    )
    assert settings_from_env({}).denied_cidrs == ()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("169.254.0.0/33", r"DENIED_CIDRS: '169.254.0.0/33' is not a CIDR"),
        ("metadata.google.internal", r"DENIED_CIDRS: 'metadata.google.internal' is not a CIDR"),
        ("10.0.0.1/8", r"DENIED_CIDRS: '10.0.0.1/8' has host bits set: did you mean 10.0.0.0/8\?"),
    ],
)
def test_a_bad_cidr_fails_start_up_naming_the_setting(value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        settings_from_env({"DENIED_CIDRS": value})


def test_contract_carries_the_denied_networks() -> None:
    settings = Settings(denied_cidrs=("169.254.0.0/16", "fd00:ec2::254/128"))
    contract = contract_of(builders.build_config_map(resolved(), settings))
    assert contract["network"] == {"deniedCidrs": ["169.254.0.0/16", "fd00:ec2::254/128"]}


def test_contract_has_no_network_block_without_denied_networks() -> None:
    assert "network" not in contract_of(builders.build_config_map(resolved(), Settings()))


@pytest.mark.parametrize("golden", ["iris-sql", "krateo-custom"])
def test_golden_contracts_are_unchanged_with_default_settings(golden: str) -> None:
    example = {"iris-sql": "iris-sql/iris-sql.yaml", "krateo-custom": "krateo/krateo-custom.yaml"}
    docs = [
        d
        for d in yaml.safe_load_all((ROOT / "testdata/examples" / example[golden]).read_text())
        if d
    ]
    cfg = next(d for d in docs if d["kind"] == "InferenceConfig")
    obj = next(d for d in docs if d["kind"] == "InferenceRun")
    expected = (ROOT / "testdata/contracts" / f"{golden}.json").read_text()
    meta = json.loads(expected)
    ns = meta["run"]["namespace"]
    pair = Resolved(
        run=ObjectIdentity(obj["metadata"]["name"], ns, meta["run"]["uid"], 1),
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        config=ObjectIdentity(cfg["metadata"]["name"], ns, "", 1),
        config_spec=InferenceConfigSpec.model_validate(cfg["spec"]),
    )
    assert builders.build_contract(pair, Settings()).to_json() == expected


def test_decide_renders_the_setting_into_the_contract_it_creates() -> None:
    obj = run()
    observed = Observed(
        run=obj,
        spec=InferenceRunSpec.model_validate(obj["spec"]),
        previous=InferenceRunStatus.model_validate({}),
        config=config(),
    )
    settings = Settings(denied_cidrs=("169.254.0.0/16",))
    decision = decide(observed, settings, now=datetime(2026, 1, 1, tzinfo=UTC))
    config_map = next(w.body for w in decision.writes if isinstance(w, Create))
    assert contract_of(config_map)["network"] == {"deniedCidrs": ["169.254.0.0/16"]}
