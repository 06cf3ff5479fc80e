"""A storage plug-in added in three places, seen from the controller and from the runner.

The plug-in is `gcs` in plugin_backend/: its settings model (settings.py), its backend
(backend.py) and the one entry-point line below, installed as a dist-info directory put on
sys.path, as `pip install` would leave it. Nothing in contracts, controller or runners
names it.

Real: entry-point discovery, contracts validation, the controller's Secret walker,
pod builder and validation, the runner's registry, CLI and pipeline, the file input.
Faked: the bucket (a dict in plugin_backend.backend, standing in for google-cloud-storage),
the model (FakeModel registered in place of `kserve-v2`), and the Secret mount (a file
written where the pod builder mounts it, under a temporary secrets directory).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeModel
from plugin_backend.backend import BUCKETS, Bucket
from plugin_backend.settings import GcsStorage

from contracts import plugins
from contracts.config import InferenceConfigSpec
from contracts.contract import DEFAULT_SECRETS_DIR
from controller.core import builders, resolve
from controller.core.settings import Settings
from runners import cli, registry
from tests.controller.unit.objects import config, resolved

ENTRY_POINT = "gcs = plugin_backend.settings:GcsStorage"  # the third place
SETTINGS = Settings(default_runner_image="ghcr.io/longrun/runner:default")
GCS = {"bucket": "preds", "prefix": "iris/out", "credentialsSecretRef": {"name": "gcs-key"}}


@pytest.fixture(autouse=True)
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plug-in installed: a dist-info directory holding its entry-point line, on sys.path."""
    dist = tmp_path / "site" / "longrun_gcs-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "entry_points.txt").write_text(f"[{plugins.STORAGE_GROUP}]\n{ENTRY_POINT}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    plugins.entry_points.cache_clear()
    yield
    plugins.entry_points.cache_clear()


def output(**gcs: Any) -> dict[str, Any]:
    """Config spec fields with the given `gcs` block as the output storage."""
    return {"storage": {"input": {"file": {"path": "/in.jsonl"}}, "output": {"gcs": gcs}}}


def test_settings_are_validated_by_the_plugins_model() -> None:
    spec = InferenceConfigSpec.model_validate(config(**output(**GCS))["spec"])
    assert isinstance(spec.storage.output.body(), GcsStorage)
    problem = resolve.parse_config_spec(config(**output(prefix="iris/out")))
    assert isinstance(problem, resolve.Problem) and problem.reason == "InvalidConfig"
    assert "gcs.bucket: Field required" in problem.message


def test_its_secret_is_mounted_by_the_pod_builder() -> None:
    pod = builders.build_pod_template(resolved(**output(**GCS)), SETTINGS)["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    mount = mounts[f"{DEFAULT_SECRETS_DIR}/gcs-key"]
    assert volumes[mount["name"]]["secret"]["secretName"] == "gcs-key"
    assert mount["readOnly"] is True


def test_its_secret_in_another_namespace_is_refused() -> None:
    elsewhere = {**GCS, "credentialsSecretRef": {"name": "gcs-key", "namespace": "other"}}
    problem = resolve.check(resolved(**output(**elsewhere)), SETTINGS)
    assert problem is not None and problem.reason == "SecretInOtherNamespace"
    assert problem.field == "spec.storage.output.gcs.credentialsSecretRef"


def test_the_controller_side_never_imports_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "plugin_backend.backend")  # put back afterwards
    run = resolved(**output(**GCS))
    builders.build_pod_template(run, SETTINGS)
    builders.build_contract(run)
    assert "plugin_backend.backend" not in sys.modules


def test_records_flow_through_the_pipeline_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller renders the contract; the runner runs it, with the Secret mounted."""
    (tmp_path / "in.jsonl").write_text("".join(f'{{"n": {n}}}\n' for n in range(25)))
    (tmp_path / "gcs-key").mkdir()
    (tmp_path / "gcs-key" / "key.json").write_text("sa-key\n")
    storage = {"input": {"file": {"path": str(tmp_path / "in.jsonl")}}, "output": {"gcs": GCS}}
    contract = builders.build_contract(resolved(storage=storage, runner={"chunkSize": 10}))
    path = tmp_path / "contract.json"
    path.write_text(contract.model_copy(update={"secrets_dir": str(tmp_path)}).to_json())
    BUCKETS["preds"] = Bucket(key="sa-key")
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    registry.model_protocols.register("kserve-v2", FakeModel().factory)
    try:
        assert cli.main(["--contract", str(path)]) == 0
    finally:
        registry.model_protocols.unregister("kserve-v2")
    objects = BUCKETS.pop("preds").objects
    assert sorted(objects) == [
        "iris/out-errors/_SUCCESS",  # the default error output: the backend's error_settings
        "iris/out-errors/part-000000.jsonl",  # empty: the first chunk's is always written
        "iris/out/_SUCCESS",
        *[f"iris/out/part-{i:06d}.jsonl" for i in range(3)],
    ]
    chunks = [objects[f"iris/out/part-{i:06d}.jsonl"] for i in range(3)]
    rows = [json.loads(line) for chunk in chunks for line in chunk.splitlines()]
    assert [row["input"]["n"] for row in rows] == list(range(25))
    summary = json.loads((tmp_path / "termination-log").read_text())
    assert (summary["recordsWritten"], summary["output"]) == (25, "gs://preds/iris/out")
