"""`longrun run --set KIND[/NAME]:PATH=VALUE`: parsing, applying, and the one-line errors.

Real: local.overrides on objects loaded by local.inputs from YAML files, and `longrun run`
in-process (`local.run.main`) for the errors and for an override reaching the run's
contract. Faked: the runner image (tests/local/fake_runner.py, mapped with --image-map),
which records the contract it was given.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from local.inputs import InputError, Inputs, load_inputs
from local.overrides import apply_overrides, parse_override, parse_path
from local.run import main
from tests.local.conftest import fake_image_map, fake_run_yaml

TWO_CONFIGS = """\
apiVersion: v1
kind: Secret
metadata: {name: db}
stringData: {url: "sqlite:///a.db"}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {name: one}
spec:
  model: {protocol: kserve-v1, url: "http://iris.models.svc", name: iris}
  storage:
    input: {file: {path: /data/in.jsonl}}
    output: {file: {path: /data/out}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata: {name: two, namespace: other}
spec:
  model: {protocol: kserve-v1, url: "http://iris.models.svc", name: iris}
  storage:
    input: {file: {path: /data/in.jsonl}}
    output: {file: {path: /data/out}}
"""


def loaded(tmp_path: Path) -> Inputs:
    (tmp_path / "objects.yaml").write_text(TWO_CONFIGS)
    return load_inputs([str(tmp_path / "objects.yaml")], namespace="default")


def model_url(inputs: Inputs, namespace: str, name: str) -> str:
    return str(inputs.configs[(namespace, name)]["spec"]["model"]["url"])


def test_a_named_override_changes_that_object_only(tmp_path: Path) -> None:
    inputs = loaded(tmp_path)
    apply_overrides(inputs, ["InferenceConfig/one:spec.model.url=http://127.0.0.1:8080"])
    assert model_url(inputs, "default", "one") == "http://127.0.0.1:8080"
    assert model_url(inputs, "other", "two") == "http://iris.models.svc"


def test_a_kind_without_a_name_changes_every_object_of_that_kind(tmp_path: Path) -> None:
    inputs = loaded(tmp_path)
    apply_overrides(inputs, ["icfg:spec.model.url=http://127.0.0.1:9"])
    assert model_url(inputs, "default", "one") == model_url(inputs, "other", "two")


def test_values_are_yaml_and_missing_maps_are_created(tmp_path: Path) -> None:
    inputs = loaded(tmp_path)
    apply_overrides(
        inputs,
        [
            "icfg/one:spec.runner.batchSize=64",
            "icfg/one:spec.model.inputFields=[a, b]",
            "icfg/one:spec.model.inputFields[2]=c",
            'icfg/one:spec.model.version="2"',
            r"icfg/one:metadata.annotations.example\.com/owner=me",
        ],
    )
    spec = inputs.configs[("default", "one")]["spec"]
    assert spec["runner"] == {"batchSize": 64}
    assert spec["model"]["inputFields"] == ["a", "b", "c"]
    assert spec["model"]["version"] == "2"
    annotations = inputs.configs[("default", "one")]["metadata"]["annotations"]
    assert annotations == {"example.com/owner": "me"}


def test_a_secret_takes_string_data_as_typed_or_base64_data(tmp_path: Path) -> None:
    inputs = loaded(tmp_path)
    encoded = base64.b64encode(b"s3cr3t").decode()
    apply_overrides(inputs, ["Secret/db:stringData.url=true", f"secret:data.password={encoded}"])
    assert inputs.secrets[("default", "db")] == {"url": b"true", "password": b"s3cr3t"}


def test_paths_split_on_unescaped_dots_and_take_list_indexes() -> None:
    assert parse_path(r"a.b[0].c\.d[1][2]", flag="x") == ("a", "b", 0, "c.d", 1, 2)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("spec.model.url=x", "expected KIND[/NAME]:PATH=VALUE"),
        ("icfg:spec.model.url", "expected KIND[/NAME]:PATH=VALUE"),
        ("Deployment:spec.replicas=1", "unknown kind 'Deployment'"),
        ("icfg:metadata.name=x", "metadata.name is the object's identity"),
        ("icfg:kind=Foo", "kind is the object's identity"),
        ("icfg:spec..url=x", "bad PATH"),
        ("icfg:spec.model[0]x=1", "bad PATH"),
        ("icfg:spec.model.url={a", "VALUE is not YAML"),
    ],
)
def test_a_malformed_override_is_refused_saying_what_is_wrong(entry: str, message: str) -> None:
    with pytest.raises(InputError, match=r"^--set ") as caught:
        parse_override(entry)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("icfg/three:spec.model.url=x", "no InferenceConfig named 'three' in the given files"),
        ("irun:spec.timeoutSeconds=1", "no InferenceRun in the given files"),
        ("icfg/one:spec.model.url.host=x", "spec.model.url is not a map"),
        ("icfg/one:spec.model.inputFields[1]=x", "spec.model.inputFields has 0 items: no [1]"),
        ("icfg/one:spec.model[0]=x", "spec.model is not a list"),
        ("secret/db:stringData=x", "a Secret takes stringData.KEY or data.KEY"),
        ("secret/db:data.k=not-base64!", "data.k: not base64"),
    ],
)
def test_an_override_that_cannot_apply_is_refused(tmp_path: Path, entry: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        apply_overrides(loaded(tmp_path), [entry])
    assert message in str(caught.value)


def test_longrun_run_reports_a_bad_override_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.yaml").write_text(fake_run_yaml(out=tmp_path, mode="ok"))
    code = main(["-f", str(tmp_path / "run.yaml"), "--set", "icfg/nope:spec.image=x"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "longrun run: --set 'icfg/nope:spec.image=x': "
        "no InferenceConfig named 'nope' in the given files"
    )


def test_an_override_reaches_the_runs_contract(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(fake_run_yaml(out=tmp_path, mode="ok"))
    (tmp_path / "token.env").write_text("token=abc\n")
    args = ["-f", str(tmp_path / "run.yaml"), "--env-file", f"token={tmp_path / 'token.env'}"]
    args += ["--image-map", fake_image_map(), "--work-dir", str(tmp_path / "work")]
    args += ["--set", "irun:spec.parameters.batch=2026-11"]
    assert main(args) == 0
    seen = sorted((tmp_path / "seen").glob("attempt-*.json"))
    contract = json.loads(seen[-1].read_text())["contract"]
    assert contract["parameters"]["batch"] == "2026-11"
