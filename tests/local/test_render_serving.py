"""`longrun render -f` of ModelDeployments: every object the controller creates for each
serving example, exactly as its reconcile decides them.

Real: the `longrun` CLI's main() in-process, the example files under
testdata/examples/serving, YAML parsing, and the controller's own decision function
(`controller.core.serving.decide.decide_deployment`), fed the deployment and its Model as a
reconcile observes them before any child exists: what render prints must be the bodies of
the Create writes it decides, the key Secret's keys left out. Faked: nothing (no cluster: the
UID is the local one, the random source gives zero bytes).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.cli import main
from controller.core.serving.decide import Create, decide_deployment
from controller.core.serving.observed import ServingObserved
from controller.core.serving.settings import serving_settings_from_env
from local.inputs import run_uid
from local.render_serving import zero_entropy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "testdata" / "examples" / "serving"
Obj = dict[str, Any]
# What a cluster running each example allows beyond the defaults, as its header tells the
# admin (tests/controller/unit/serving/objects.py holds the same as settings).
ALLOWING = {
    "generic.yaml": {
        "ALLOWED_SERVING_IMAGES": "registry.example.com/ml/*",
        "SERVING_ALLOW_CUSTOM_COMMANDS": "true",
    },
    "llamacpp.yaml": {
        "ALLOWED_SERVING_HOSTS": "*.llm.example.com",
        "ALLOWED_SERVING_CLUSTER_ISSUERS": "letsencrypt",
    },
}


def documents(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def deployments() -> list[tuple[str, str]]:
    return [
        (path.name, doc["metadata"]["name"])
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for doc in documents(path)
        if doc["kind"] == "ModelDeployment"
    ]


def as_observed(obj: Obj) -> Obj:
    """As the API server holds it after `kubectl apply`: namespace, uid, generation."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    meta.setdefault("namespace", "default")
    meta["generation"] = 1
    meta["uid"] = run_uid(meta["namespace"], meta["name"])
    return obj


def controller_creates(path: Path, name: str) -> list[Obj]:
    """The objects the controller's first reconcile of the deployment decides to create."""
    docs = documents(path)
    obj = next(d for d in docs if d["kind"] == "ModelDeployment" and d["metadata"]["name"] == name)
    ref = (obj["spec"].get("modelRef") or {}).get("name")
    models = [d for d in docs if d["kind"] == "Model" and d["metadata"]["name"] == ref]
    model = as_observed(models[0]) if models else None
    decision = decide_deployment(
        ServingObserved(as_observed(obj), model),
        serving_settings_from_env(),
        now=datetime(2026, 1, 1, tzinfo=UTC),
        entropy=zero_entropy,
    )
    assert decision.status.phase == "Pending", decision.status.message
    bodies = [copy.deepcopy(w.body) for w in decision.writes if isinstance(w, Create)]
    for body in bodies:
        if body["kind"] == "Secret":
            body.pop("data")  # render never prints a key
    return bodies


def rendered(capsys: pytest.CaptureFixture[str], *args: str) -> list[Obj]:
    assert main(["render", *args]) == 0, capsys.readouterr().err
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]


@pytest.mark.parametrize(("example", "name"), deployments())
@pytest.mark.parametrize("metrics", [False, True], ids=["plain", "model-server-metrics"])
def test_render_prints_exactly_what_the_controller_creates_for_each_serving_example(
    example: str,
    name: str,
    metrics: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in ALLOWING.get(example, {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SERVING_METRICS", "true" if metrics else "false")
    path = EXAMPLES / example

    out = rendered(capsys, "-f", str(path), name)

    assert out == controller_creates(path, name)
    kinds = [o["kind"] for o in out]
    assert kinds[0] == "Secret" and "Deployment" in kinds and "Service" in kinds
    secret = out[0]
    assert "data" not in secret and "stringData" not in secret


def test_render_prints_every_kind_a_deployment_can_make_in_the_controllers_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in ALLOWING["llamacpp.yaml"].items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DENIED_CIDRS", "169.254.0.0/16")
    path = EXAMPLES / "llamacpp.yaml"
    text = path.read_text().replace("  idleReplicas: 0\n", "  autoscaling: {maxReplicas: 3}\n")
    copy_path = tmp_path / "llamacpp.yaml"
    copy_path.write_text(text)

    kinds = [o["kind"] for o in rendered(capsys, "-f", str(copy_path), "qwen-chat")]

    assert kinds == [
        "Secret",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "NetworkPolicy",
        "HorizontalPodAutoscaler",
        "Certificate",
        "Ingress",
    ]


def test_json_output_is_a_list_as_kubectl_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(EXAMPLES / "kserve.yaml"), "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List" and listed["items"][2]["kind"] == "Deployment"


def test_a_refused_deployment_says_the_field_and_the_setting_and_renders_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["render", "-f", str(EXAMPLES / "generic.yaml")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(
        "longrun render: ModelDeployment/iris-generic: spec.runtime.generic.image"
    )
    assert "ALLOWED_SERVING_IMAGES (chart: serving.allowedImages)" in line


def test_a_model_alone_renders_nothing_and_says_what_to_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = next(d for d in documents(EXAMPLES / "vllm.yaml") if d["kind"] == "Model")
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(model))
    assert main(["render", "-f", str(tmp_path / "model.yaml")]) == 2
    err = capsys.readouterr().err
    assert "Model/qwen2-5-0-5b-instruct-hf makes no object of its own" in err


def test_a_deployment_whose_model_is_not_in_the_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = next(d for d in documents(EXAMPLES / "vllm.yaml") if d["kind"] == "ModelDeployment")
    (tmp_path / "mdep.yaml").write_text(yaml.safe_dump(dep))
    assert main(["render", "-f", str(tmp_path / "mdep.yaml")]) == 1
    err = capsys.readouterr().err
    assert 'spec.modelRef: Model "default/qwen2-5-0-5b-instruct-hf" is not in the files' in err
