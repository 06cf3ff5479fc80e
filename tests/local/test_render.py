"""`longrun render`: the ConfigMap and Job/CronJob the controller creates, printed as YAML.

Real: the `longrun` CLI's main() in-process (and, once, the installed console script in a
subprocess), the example files under testdata/examples, YAML parsing, and the controller's own
decision function (`controller.core.decide`), fed the same run and config as a reconcile
would observe them before any child exists: what render prints must be exactly the bodies
of the Create writes it decides. Faked: nothing (no cluster: the run's UID is the local one).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.run import InferenceRunSpec, InferenceRunStatus
from controller.cli import main
from controller.core.decide import Create, decide
from controller.core.settings import settings_from_env
from controller.core.status import Observed
from local.inputs import run_uid

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "testdata" / "examples"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
Obj = dict[str, Any]


def rendered(capsys: pytest.CaptureFixture[str], *args: str) -> list[Obj]:
    assert main(["render", *args]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]


def as_observed(obj: Obj, namespace: str) -> Obj:
    """An object as the API server holds it after `kubectl apply`: namespace, uid, generation."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.setdefault("namespace", namespace)
    meta.setdefault("generation", 1)
    meta["uid"] = run_uid(meta["namespace"], meta["name"])
    return obj


def controller_creates(path: Path, run_name: str) -> list[Obj]:
    """The objects the controller's reconcile decides to create for the run in `path`."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    run = next(d for d in docs if d["kind"] == "InferenceRun" and d["metadata"]["name"] == run_name)
    namespace = run["metadata"].get("namespace", "default")
    config = next(
        d
        for d in docs
        if d["kind"] == "InferenceConfig"
        and d["metadata"]["name"] == run["spec"]["configRef"]["name"]
    )
    observed = Observed(
        run=as_observed(run, namespace),
        spec=InferenceRunSpec.model_validate(run["spec"]),
        previous=InferenceRunStatus(),
        config=as_observed(config, namespace),
    )
    decision = decide(observed, settings_from_env(), now=NOW)
    return [w.body for w in decision.writes if isinstance(w, Create)]


@pytest.mark.parametrize(
    ("example", "run", "kinds"),
    [
        ("iris-sql/iris-sql.yaml", "iris-sql-once", ["ConfigMap", "Job"]),
        ("triton-s3/triton-s3.yaml", "triton-s3-once", ["ConfigMap", "Job"]),
        ("scheduled/scheduled.yaml", None, ["ConfigMap", "CronJob"]),
        ("krateo/krateo.yaml", "krateo-iris", ["ConfigMap", "Job"]),
    ],
)
def test_render_prints_the_configmap_and_job_the_controller_creates(
    capsys: pytest.CaptureFixture[str], example: str, run: str | None, kinds: list[str]
) -> None:
    path = EXAMPLES / example
    args = ["-f", str(path), *([run] if run else [])]
    if "krateo" in example:
        args += ["-n", "kserve-test"]
    objects = rendered(capsys, *args)
    assert [o["kind"] for o in objects] == kinds
    name = run or next(
        d["metadata"]["name"]
        for d in yaml.safe_load_all(path.read_text())
        if d["kind"] == "InferenceRun"
    )
    assert objects == controller_creates(path, name)


def test_render_picks_one_run_by_name_when_the_files_hold_several(
    capsys: pytest.CaptureFixture[str],
) -> None:
    krateo = str(EXAMPLES / "krateo")
    assert main(["render", "-f", krateo]) == 2  # two runs: which one?
    assert "found: kserve-test/krateo-custom, kserve-test/krateo-iris" in capsys.readouterr().err
    objects = rendered(capsys, "-f", krateo, "krateo-custom", "-n", "kserve-test")
    assert [o["metadata"]["name"] for o in objects] == ["krateo-custom-contract", "krateo-custom"]


def test_render_completes_a_generate_name_and_can_pick_the_run_by_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLES / "iris-sql/iris-sql.yaml").read_text()
    assert "name: iris-sql-once" in text
    path = tmp_path / "run.yaml"
    path.write_text(text.replace("name: iris-sql-once", "generateName: iris-sql-"))
    for args in (["-f", str(path)], ["-f", str(path), "iris-sql-"]):
        config_map, job = rendered(capsys, *args)
        name = job["metadata"]["name"]
        assert name.startswith("iris-sql-") and len(name) == len("iris-sql-") + 5
        assert job["metadata"]["ownerReferences"][0]["name"] == name
        contract = json.loads(config_map["data"]["contract.json"])
        assert contract["run"]["name"] == name and contract["jobName"] == name


def test_render_output_json_is_a_kubectl_list(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "scheduled")
    assert main(["render", "-f", path, "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["apiVersion"] == "v1" and listed["kind"] == "List"
    assert [o["kind"] for o in listed["items"]] == ["ConfigMap", "CronJob"]
    assert listed["items"] == rendered(capsys, "-f", path)


def test_render_refuses_invalid_input_in_one_line_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text((EXAMPLES / "iris-sql/iris-sql.yaml").read_text().replace("1800", "0"))
    assert main(["render", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        f"{path}: InferenceRun/iris-sql-once: spec.timeoutSeconds: "
        "Input should be greater than or equal to 1"
    ]
    assert main(["render", "-f", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: no such file or directory" in capsys.readouterr().err


def test_the_installed_command_renders_yaml_a_pipe_can_read() -> None:
    script = Path(sys.executable).with_name("longrun")
    done = subprocess.run(
        [str(script), "render", "-f", str(EXAMPLES / "iris-sql")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [d["kind"] for d in yaml.safe_load_all(done.stdout)] == ["ConfigMap", "Job"]
    assert "Traceback" not in done.stderr
