"""The pydantic models: what they accept, reject and how they serialize.

Real: the models, Krateo's own example YAML (vendored in testdata/krateo-upstream).
Faked: the installed entry points, where a test needs a storage plug-in.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

import contracts
from contracts import plugins
from contracts.base import SecretKeyRef, SecretReference
from contracts.config import InferenceConfigSpec
from contracts.contract import RunnerContract
from contracts.resources import API_VERSION, parse_resource
from contracts.storage import EndpointRef, S3Credentials, StorageSpec

ROOT = Path(__file__).resolve().parents[2]
KRATEO_DIR = ROOT / "testdata" / "krateo-upstream"
SHARED_KRATEO_DIR = ROOT.parent / "shared" / "krateo-testdata"
ENDPOINT = {"protocol": "kserve-v2", "url": "http://iris:8080", "name": "iris"}
FILE_IN = {"file": {"path": "/data/in.jsonl"}}
FILE_OUT = {"file": {"path": "/data/out"}}


def _all_models() -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo: list[Any] = [contracts.InferenceConfig, contracts.InferenceRun, RunnerContract]
    while todo:
        item = todo.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item in seen:
                continue
            seen.add(item)
            todo.extend(f.annotation for f in item.model_fields.values())
        else:
            todo.extend(typing.get_args(item))
    return seen


def _config(**spec: Any) -> InferenceConfigSpec:
    body = {"model": ENDPOINT, "storage": {"input": FILE_IN, "output": FILE_OUT}} | spec
    return InferenceConfigSpec.model_validate(body)


@pytest.mark.parametrize("model", sorted(_all_models(), key=lambda m: m.__name__), ids=str)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    if model.__module__ == "contracts.resources":
        return  # apiVersion/kind/metadata envelopes are described by Kubernetes itself
    missing = [name for name, f in model.model_fields.items() if not f.description]
    assert not missing, f"{model.__name__} fields without description: {missing}"


def test_credentials_are_only_secret_references() -> None:
    suspicious = {"password", "token", "apikey", "secret", "credentials"}
    for model in _all_models():
        for name, field in model.model_fields.items():
            words = set(name.lower().split("_"))
            if words & suspicious and not words & {"ref", "key", "dir"}:
                # A ServiceAccountToken holds an audience: the kubelet issues the token itself.
                kinds = ("SecretKeyRef", "S3Credentials", "ServiceAccountToken")
                assert any(kind in str(field.annotation) for kind in kinds), (
                    f"{model.__name__}.{name} looks like a credential value"
                )


def test_vendored_krateo_examples_are_krateos_own() -> None:
    vendored = sorted(p.name for p in KRATEO_DIR.glob("*.yaml"))
    assert len(vendored) == 4
    if SHARED_KRATEO_DIR.is_dir():  # the team's copy; absent outside our machines
        assert vendored == sorted(p.name for p in SHARED_KRATEO_DIR.glob("*.yaml"))
        for name in vendored:
            assert (KRATEO_DIR / name).read_bytes() == (SHARED_KRATEO_DIR / name).read_bytes()


@pytest.mark.parametrize("path", sorted(KRATEO_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_accepts_krateo_examples_with_our_api_version(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        doc["apiVersion"] = API_VERSION
        assert parse_resource(doc).kind in ("InferenceConfig", "InferenceRun")


def test_unknown_storage_kind_passes_through_untouched() -> None:
    custom = {"custom": {"s3": {"endpointRef": {"name": "x"}, "moreCustom": "data"}}}
    storage = StorageSpec.model_validate(custom)
    assert storage.kind == "custom"
    assert storage.body() == custom["custom"]
    assert storage.to_wire() == custom


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[metadata.EntryPoint]]:
    """The entry points the installed packages declare: none unless a test adds some."""
    eps: list[metadata.EntryPoint] = []
    monkeypatch.setattr(
        plugins.metadata, "entry_points", lambda group: [e for e in eps if e.group == group]
    )
    plugins.entry_points.cache_clear()
    yield eps
    plugins.entry_points.cache_clear()


def test_a_kind_whose_entry_point_names_no_settings_model_passes_through(
    installed: list[metadata.EntryPoint],
) -> None:
    installed += [
        metadata.EntryPoint("legacy", "json:dumps", plugins.STORAGE_GROUP),  # a backend, say
        metadata.EntryPoint("broken", "no_such_module:Settings", plugins.STORAGE_GROUP),
    ]
    for kind in ("legacy", "broken"):
        assert StorageSpec.model_validate({kind: {"a": 1}}).body() == {"a": 1}


def test_every_model_naming_a_secret_is_a_secret_reference() -> None:
    """The controller finds Secrets by this marker alone: a credential model without it
    would have its Secret neither mounted nor namespace-checked."""

    def names_a_secret(model: type[BaseModel]) -> bool:
        name = model.model_fields.get("name")
        return name is not None and "Secret" in (name.description or "")

    models = _all_models()
    naming = {m for m in models if names_a_secret(m)}
    assert naming == {m for m in models if issubclass(m, SecretReference)}
    assert naming >= {SecretKeyRef, S3Credentials, EndpointRef}


def test_builtin_storage_kind_is_validated() -> None:
    with pytest.raises(ValidationError, match="bucket"):
        StorageSpec.model_validate({"s3": {"bucket": "ab", "key": "k"}})


def test_storage_needs_exactly_one_kind() -> None:
    with pytest.raises(ValidationError, match=r"exactly one storage kind \(found: s3, file\)"):
        StorageSpec.model_validate({"s3": {"bucket": "abc", "key": "k"}, **FILE_IN})


def test_kserve_block_normalizes_to_model() -> None:
    spec = InferenceConfigSpec.model_validate(
        {
            "kserve": {
                "modelName": "sklearn-iris",
                "modelUrl": "iris.ns.svc/v1/models/sklearn-iris:predict",
                "modelVersion": "v1",
            },
            "storage": {"input": FILE_IN, "output": FILE_OUT},
        }
    )
    endpoint = spec.endpoint()
    assert (endpoint.protocol, endpoint.name) == ("kserve-v1", "sklearn-iris")
    assert endpoint.url == "iris.ns.svc/v1/models/sklearn-iris:predict"
    assert spec.uses_krateo_contract_path()


def test_model_block_does_not_mount_krateo_path_by_default() -> None:
    assert not _config().uses_krateo_contract_path()
    assert _config(krateoContractPath=True).uses_krateo_contract_path()


def test_refuses_model_and_kserve_together() -> None:
    kserve = {"modelName": "iris", "modelUrl": "iris/v2/models/iris/infer"}
    with pytest.raises(ValidationError, match="set only one of model and kserve"):
        _config(kserve=kserve)


def test_sql_url_with_password_is_refused() -> None:
    sql = {"sql": {"url": "postgresql://u:secret@db/x", "table": "t"}}
    with pytest.raises(ValidationError, match="must not contain a password"):
        _config(storage={"input": sql, "output": FILE_OUT})


def test_sql_url_without_password_is_accepted() -> None:
    sql = {"sql": {"url": "postgresql://reader@db/x", "table": "t"}}
    assert _config(storage={"input": sql, "output": FILE_OUT}).storage.input.kind == "sql"


def test_file_volume_mounts_at_the_first_directory_of_the_path() -> None:
    files = {"file": {"path": "/data/in/rows.jsonl", "volume": "inputs"}}
    spec = _config(storage={"input": files, "output": FILE_OUT})
    assert spec.storage.input.file is not None
    assert spec.storage.input.file.volume_mount_path() == "/data"


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ({"path": "in.jsonl", "volume": "v"}, "must be absolute when volume is set"),
        ({"path": "/data/in.jsonl", "volume": "v", "mountPath": "/mnt"}, "not below mountPath"),
        ({"path": "/data/in.jsonl", "volume": "Not_A_Name"}, "volume"),
    ],
)
def test_file_volume_needs_a_path_inside_its_mount(file: dict[str, str], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _config(storage={"input": {"file": file}, "output": FILE_OUT})


def test_defaults_are_filled_in() -> None:
    spec = _config()
    assert spec.auto_delete_policy == "None"
    # batchSize unset: the runner takes 256 or 32 by protocol (contracts.config.default_batch_size)
    assert (spec.runner.batch_size, spec.runner.concurrency) == (None, 8)
    run = contracts.InferenceRunSpec.model_validate({"configRef": {"name": "c"}})
    assert (run.concurrency_policy, run.suspend, run.is_scheduled) == ("Forbid", False, False)


def test_wire_format_is_camel_case_and_round_trips() -> None:
    spec = _config(autoDeletePolicy="DeleteOnSuccess")
    wire = spec.to_wire()
    assert wire["autoDeletePolicy"] == "DeleteOnSuccess"
    assert "chunkSize" in wire["runner"]
    assert InferenceConfigSpec.model_validate(wire) == spec


def test_secret_key_ref_holds_no_value() -> None:
    assert set(SecretKeyRef.model_fields) == {"name", "key"}


def test_custom_runner_protocol_is_accepted_when_namespaced() -> None:
    spec = _config(model=ENDPOINT | {"protocol": "acme.com/scoring"})
    assert spec.endpoint().protocol == "acme.com/scoring"
    with pytest.raises(ValidationError, match="protocol"):
        _config(model=ENDPOINT | {"protocol": "scoring"})


def test_concurrency_auto_starts_at_four_within_its_maximum() -> None:
    auto = _config(runner={"concurrency": "auto"}).runner
    assert (auto.is_auto, auto.concurrency_start, auto.concurrency_cap) == (True, 4, 64)
    small = _config(runner={"concurrency": "auto", "maxConcurrency": 2}).runner
    assert (small.concurrency_start, small.concurrency_cap) == (2, 2)
    fixed = _config(runner={"concurrency": 12}).runner
    assert (fixed.is_auto, fixed.concurrency_start, fixed.concurrency_cap) == (False, 12, 12)
    assert _config(runner={"concurrency": "auto"}).to_wire()["runner"]["concurrency"] == "auto"


@pytest.mark.parametrize(
    ("runner", "message"),
    [
        ({"concurrency": "fast"}, "a number of requests from 1 to 256, or auto"),
        ({"concurrency": "8"}, "a number of requests from 1 to 256, or auto"),
        ({"concurrency": 0}, "a number of requests from 1 to 256, or auto"),
        ({"concurrency": True}, "a number of requests from 1 to 256, or auto"),
        ({"maxConcurrency": 16}, "maxConcurrency and initialConcurrency: only with concurrency"),
        ({"initialConcurrency": 2}, "maxConcurrency and initialConcurrency: only with concurrency"),
        (
            {"concurrency": "auto", "maxConcurrency": 8, "initialConcurrency": 9},
            "initialConcurrency: must not exceed maxConcurrency",
        ),
        (
            {"concurrency": "auto", "initialConcurrency": 65},
            "initialConcurrency: must not exceed maxConcurrency",
        ),
    ],
)
def test_concurrency_refuses_what_is_neither_a_number_nor_auto(
    runner: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _config(runner=runner)
