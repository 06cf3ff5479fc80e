"""The `longrun` CLI: validate, crds, schema, version and exit codes.

Real: the CLI's main() in-process and the installed `longrun` console script in a
subprocess; the example and invalid YAML under testdata/. Faked: nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from controller.cli import main
from controller.crds import crd_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "testdata" / "examples"
INVALID = sorted((ROOT / "testdata" / "invalid").glob("*.yaml"))


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    return first.removeprefix("# expect: ")


def test_every_example_validates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert out.count(": valid") >= 10


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example_is_rejected_naming_the_field(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "-q", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: {_expected(path)}" in err


def test_invalid_files_cover_the_validation_rules() -> None:
    assert len(INVALID) >= 30


def test_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", "no/such/file.yaml"]) == 2
    assert "no/such/file.yaml: no such file or directory" in capsys.readouterr().err


def test_file_without_longrun_objects_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["validate", "-f", str(tmp_path)]) == 1
    assert "no InferenceConfig or InferenceRun found" in capsys.readouterr().err


def test_broken_yaml_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: InferenceRun\n  spec: [\n")
    assert main(["validate", "-f", str(bad)]) == 1
    assert f"{bad}: not valid YAML" in capsys.readouterr().err


def test_crds_prints_what_is_committed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crds"]) == 0
    assert capsys.readouterr().out == "---\n".join(crd_files().values())


def test_crds_write_creates_files(tmp_path: Path) -> None:
    assert main(["crds", "--write", "--dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(crd_files())


def test_schema_contract_prints_the_committed_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "contract"]) == 0
    printed = capsys.readouterr().out
    assert printed == (ROOT / "contracts" / "contract-v1.schema.json").read_text()
    assert json.loads(printed)["title"] == "RunnerContract"


def test_unknown_subcommand_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_console_script_reports_version() -> None:
    script = Path(sys.executable).parent / "longrun"
    done = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "longrun 0.1.0"


def test_a_run_with_generate_name_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "rerun.yaml"
    doc.write_text(
        "apiVersion: longrun.dev/v1alpha1\nkind: InferenceRun\n"
        "metadata: {generateName: nightly-iris-}\nspec: {configRef: {name: iris}}\n"
    )
    assert main(["validate", "-f", str(doc)]) == 0
    assert f"{doc}: InferenceRun/nightly-iris-*: valid" in capsys.readouterr().out


def test_a_run_without_name_or_generate_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "nameless.yaml"
    doc.write_text(
        "apiVersion: longrun.dev/v1alpha1\nkind: InferenceRun\n"
        "metadata: {}\nspec: {configRef: {name: iris}}\n"
    )
    assert main(["validate", "-f", str(doc)]) == 1
    assert "InferenceRun/?: metadata: set name (or generateName" in capsys.readouterr().err


def test_validate_names_spec_parallelism_when_the_config_in_the_file_cannot_share_its_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = (
        "apiVersion: longrun.dev/v1alpha1\nkind: InferenceConfig\nmetadata: {name: sink}\n"
        "spec:\n  model: {protocol: kserve-v1, url: 'http://m:8080', name: iris}\n"
        "  storage:\n    input: {file: {path: /data/in.jsonl}}\n"
        "    output: {http: {url: 'http://sink:8080/'}}\n"
    )
    run = (
        "apiVersion: longrun.dev/v1alpha1\nkind: InferenceRun\nmetadata: {name: wide}\n"
        "spec: {configRef: {name: sink}, parallelism: 4}\n"
    )
    (tmp_path / "wide.yaml").write_text(config + "---\n" + run)
    assert main(["validate", "-q", "-f", str(tmp_path / "wide.yaml")]) == 1
    err = capsys.readouterr().err
    assert "InferenceRun/wide: spec.parallelism: " in err
    assert "spec.storage.output.http.committedUrl: required" in err
    (tmp_path / "wide.yaml").write_text(
        config + "---\n" + run.replace("parallelism: 4", "suspend: false")
    )
    assert main(["validate", "-q", "-f", str(tmp_path / "wide.yaml")]) == 0
