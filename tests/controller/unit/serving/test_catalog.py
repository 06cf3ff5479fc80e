"""Lazy registration decided from plain data: the Model made from a catalog entry, each
refusal and its words, which Model a deployment names, and the catalog settings.

Real: controller/core/serving/catalog.py, decide_deployment and serving_settings_from_env on
plain dicts. Faked: nothing (no cluster: the reconciler's reads and writes are tested in
tests/controller/emulated/test_serving_catalog.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.serving import ModelDeploymentSpec
from controller.core.serving.catalog import (
    CatalogSettings,
    model_of,
    not_registered,
    registration,
)
from controller.core.serving.decide import decide_deployment
from controller.core.serving.observed import ServingObserved
from controller.core.serving.settings import ServingSettings, serving_settings_from_env
from controller.core.settings import SettingsError
from controller.core.validation import Problem

SETTINGS = CatalogSettings("longrun-system/longrun-model-catalog")
CATALOG = {
    "models": [
        {
            "name": "iris",
            "source": "https://example.com/iris/model.joblib",
            "format": "sklearn",
            "variants": {"cpu": {}},
        }
    ]
}


def deployment(model: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "web", "namespace": "team-a", "uid": "u1", "generation": 1},
        "spec": {"model": model, "runtime": {"kserve": {}}, **spec},
    }


def register(document: object, model: dict[str, Any]) -> Any:
    obj = deployment(model)
    spec = ModelDeploymentSpec.model_validate(obj["spec"])
    return registration(document, obj=obj, spec=spec, settings=SETTINGS)


def test_the_model_is_made_in_the_deployments_namespace_from_the_entry() -> None:
    made = register(CATALOG, {"catalog": {"name": "iris"}})
    assert made.model == {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "Model",
        "metadata": {
            "name": "iris",
            "namespace": "team-a",
            "labels": {"app.kubernetes.io/managed-by": "longrun",
                       "longrun.dev/catalog-entry": "iris"},
            "annotations": {"longrun.dev/catalog-compute": "cpu", "longrun.dev/created-for": "web"},
        },
        "spec": {"source": "https://example.com/iris/model.joblib", "format": "sklearn"},
    }  # fmt: skip
    assert made.message == (
        'created Model "iris" from the cpu variant of the catalog entry "iris" in the model '
        'catalog (ConfigMap "longrun-system/longrun-model-catalog") (lazy registration)'
    )


@pytest.mark.parametrize(
    ("document", "model", "reason", "words"),
    [
        (None, {"name": "iris"}, "CatalogMissing", "does not exist or has no catalog.yaml"),
        ({"models": 3}, {"name": "iris"}, "CatalogInvalid", "is invalid: models: Input should"),
        (CATALOG, {"name": "nope"}, "CatalogEntryNotFound", 'no entry "nope" in the model'),
        (CATALOG, {"name": "iris", "compute": "gpu"}, "CatalogVariantNotFound",
         'the catalog entry "iris" has no gpu variant (it has cpu): set spec.model.catalog.'),
    ],
)  # fmt: skip
def test_each_refusal_names_the_catalog_and_what_to_do(
    document: object, model: dict[str, Any], reason: str, words: str
) -> None:
    problem = register(document, {"catalog": model})
    assert isinstance(problem, Problem)
    assert (problem.field, problem.reason) == ("spec.model.catalog", reason)
    assert words in problem.message


def test_no_catalog_or_lazy_registration_off_says_to_create_the_model() -> None:
    none = not_registered("iris", "team-a", CatalogSettings(""))
    assert none is not None and none.reason == "CatalogNotConfigured"
    off = not_registered("iris", "team-a", CatalogSettings("ns/cat", lazy=False))
    assert off is not None and off.reason == "LazyRegistrationOff"
    assert 'Model "iris" does not exist in namespace "team-a"' in off.message
    assert not_registered("iris", "team-a", SETTINGS) is None


def test_a_catalog_name_is_the_model_of_the_deployments_own_namespace() -> None:
    assert model_of(deployment({"catalog": {"name": "iris"}})) == "team-a/iris"
    ref = deployment({"catalog": {"name": "iris"}})
    ref["spec"] = {"modelRef": {"name": "m", "namespace": "shared"}}
    assert model_of(ref) == "shared/m"
    assert model_of(deployment({"source": "s3://b/k.joblib", "format": "sklearn"})) is None


def test_a_catalog_problem_fails_the_deployment_until_its_model_exists() -> None:
    problem = Problem("spec.model.catalog", "LazyRegistrationOff", "create the Model")
    obs = ServingObserved(obj=deployment({"catalog": {"name": "iris"}}), catalog=problem)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    decision = decide_deployment(obs, ServingSettings(), now=now, entropy=lambda n: b"k" * n)
    assert decision.writes == ()
    assert decision.status.phase == "Failed"
    assert decision.status.message == "spec.model.catalog: create the Model"


def test_catalog_settings_come_from_the_environment() -> None:
    assert serving_settings_from_env({}).catalog == CatalogSettings("", lazy=True)
    env = {"SERVING_CATALOG": "longrun-system/cat", "SERVING_CATALOG_LAZY": "false"}
    assert serving_settings_from_env(env).catalog == CatalogSettings("longrun-system/cat", False)
    with pytest.raises(SettingsError, match=r"^SERVING_CATALOG='cat' is not namespace/name"):
        serving_settings_from_env({"SERVING_CATALOG": "cat"})


def test_the_catalog_example_is_served_from_the_starter_catalog() -> None:
    root = Path(__file__).resolve().parents[4]
    starter = yaml.safe_load((root / "charts/longrun/catalog/catalog.yaml").read_text())
    docs = yaml.safe_load_all((root / "testdata/examples/catalog/catalog.yaml").read_text())
    obj = next(d for d in docs if d["kind"] == "ModelDeployment")
    obj["metadata"].update(namespace="team-a", uid="u1", generation=1)
    spec = ModelDeploymentSpec.model_validate(obj["spec"])
    made = registration(starter, obj=obj, spec=spec, settings=SETTINGS)
    assert not isinstance(made, Problem)
    assert made.model["spec"]["format"] == "gguf"  # the variant llama.cpp serves
    now = datetime(2026, 1, 1, tzinfo=UTC)
    decision = decide_deployment(
        ServingObserved(obj, model=made.model), ServingSettings(), now=now, entropy=bytes
    )
    assert decision.status.phase == "Pending", decision.status.message
    assert "Deployment" in {w.kind for w in decision.writes}
