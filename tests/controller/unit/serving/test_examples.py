"""The serving examples and invalid files under testdata/, checked as `longrun validate` checks
them (tests/controller/test_cli.py runs the command on every invalid file as well).

Real: the YAML files, controller.validate's document check and its message formatting, the
serving models and decide_deployment. Faked: nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.core.serving.decide import Create, decide_deployment
from controller.core.serving.observed import ServingObserved
from controller.core.serving.settings import ServingSettings
from controller.core.settings import Settings
from controller.validate import check_document
from tests.controller.unit.serving.objects import (
    EXAMPLE_VALUES,
    NOW,
    counting_entropy,
    example_settings,
)
from tests.controller.unit.serving.test_builders import restricted_violations

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = sorted((ROOT / "testdata" / "examples" / "serving").glob("*.yaml"))
INVALID = sorted(
    path
    for path in (ROOT / "testdata" / "invalid").glob("*.yaml")
    if yaml.safe_load(path.read_text()).get("kind") in ("Model", "ModelDeployment")
)
RUNTIMES = {"llamacpp", "kserve", "mlserver", "triton", "generic"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    for doc in _docs(path):
        checked = check_document(doc, file=str(path), settings=Settings())
        assert checked.findings == [], [str(f) for f in checked.findings]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_renders_restricted_pods_and_reports_pending(path: Path) -> None:
    docs = _docs(path)
    models = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Model"}
    for doc in (d for d in docs if d["kind"] == "ModelDeployment"):
        doc["metadata"].update(namespace="default", uid="uid", generation=1)
        ref = (doc["spec"].get("modelRef") or {}).get("name")
        observed = ServingObserved(doc, model=models.get(ref))
        decision = decide_deployment(
            observed, example_settings(path.name), now=NOW, entropy=counting_entropy()
        )
        assert decision.status.phase == "Pending", decision.status.message
        pod = next(
            w.body for w in decision.writes if isinstance(w, Create) and w.kind == "Deployment"
        )
        assert restricted_violations(pod["spec"]["template"]["spec"]) == []


@pytest.mark.parametrize("name", sorted(EXAMPLE_VALUES))
def test_an_example_that_needs_an_opt_in_names_it_in_its_refusal_and_its_comment(
    name: str,
) -> None:
    path = ROOT / "testdata" / "examples" / "serving" / name
    docs = _docs(path)
    models = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Model"}
    messages = []
    for doc in (d for d in docs if d["kind"] == "ModelDeployment"):
        doc["metadata"].update(namespace="default", uid="uid", generation=1)
        ref = (doc["spec"].get("modelRef") or {}).get("name")
        decision = decide_deployment(
            ServingObserved(doc, model=models.get(ref)),
            ServingSettings(),
            now=NOW,
            entropy=counting_entropy(),
        )
        assert decision.status.phase == "Failed" and not decision.writes
        messages.append(decision.status.message or "")
    first = EXAMPLE_VALUES[name][0]
    assert any(first in message for message in messages), messages
    for value in EXAMPLE_VALUES[name]:  # the comment tells the cluster admin what to allow
        assert value in path.read_text(), f"{name} should say it needs {value}"


def test_there_is_an_example_for_each_runtime() -> None:
    runtimes = {
        next(iter(doc["spec"]["runtime"]))
        for path in EXAMPLES
        for doc in _docs(path)
        if doc["kind"] == "ModelDeployment"
    }
    assert runtimes == RUNTIMES


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    return first.removeprefix("# expect: ")


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_example_is_rejected_naming_the_field(path: Path) -> None:
    (doc,) = _docs(path)
    checked = check_document(doc, file=str(path), settings=Settings())
    assert [str(f) for f in checked.findings] == [f"{path}: {_expected(path)}"]


def test_invalid_files_cover_the_new_rules() -> None:
    assert len(INVALID) >= 30
    kinds = {_docs(p)[0]["kind"] for p in INVALID}
    assert kinds == {"Model", "ModelDeployment"}
