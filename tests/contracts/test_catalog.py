"""The model catalog's schema and a deployment's `model.catalog`: what they accept, what they
refuse and in which words (the entry and the field named), and which variant a deployment
gets.

Real: the pydantic models of contracts/serving/catalog.py and deployment.py, and the CRD
translation of controller/crds.py. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contracts.serving import CatalogError, ModelDeploymentSpec, ModelRef, parse_catalog
from controller.crds import object_schema
from tests.controller.structural import violations

GGUF = "hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf@main"
HF = "hf://Qwen/Qwen2.5-0.5B-Instruct@main"


def entry(**fields: Any) -> dict[str, Any]:
    return {"name": "qwen", "source": GGUF, "format": "gguf", "variants": {"cpu": {}}, **fields}


def refusal(document: object) -> str:
    with pytest.raises(CatalogError) as caught:
        parse_catalog(document)
    return str(caught.value)


def test_a_variant_takes_the_entrys_fields_and_overrides_what_differs() -> None:
    gpu = {"source": HF, "format": "hf", "size": "1Gi"}
    both = entry(task="chat-completion", size="500Mi", variants={"cpu": None, "gpu": gpu})
    (found,) = parse_catalog({"models": [both]}).models
    assert found.model_spec("cpu").source == GGUF and found.model_spec("cpu").format == "gguf"
    assert found.model_spec("gpu").source == HF and found.model_spec("gpu").format == "hf"
    assert found.model_spec("gpu").task == "chat-completion"
    assert (found.size_of("cpu"), found.size_of("gpu")) == ("500Mi", "1Gi")


def test_an_invalid_variant_is_refused_naming_the_entry_and_the_field() -> None:
    bad = entry(variants={"cpu": {}, "gpu": {"format": "hf"}})
    assert refusal({"models": [entry(name="ok"), bad]}) == (
        'models[1] "qwen": variants.gpu: source: format hf needs a directory (a Hugging Face '
        "repository): hf://org/repo[@revision], s3://bucket/prefix/ or pvc://claim/path"
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"models": [entry(variants={})]}, 'models[0] "qwen": variants: Dictionary should have'),
        ({"models": [entry(variants={"tpu": {}})]}, "variants.tpu.[key]: Input should be 'cpu'"),
        ({"models": [entry(name="Qwen_2")]}, 'models[0] "Qwen_2": name: String should match'),
        ({"models": [entry(task="predict")]}, 'models[0] "qwen": variants.cpu: task: format gguf'),
        ({"models": [entry(source="ftp://x/y")]}, 'models[0] "qwen": source: \'ftp://x/y\''),
        ({"models": [entry(credentials={"name": "s"})]}, "credentials: Extra inputs"),
        ({"models": [entry(), entry()]}, 'models: the alias "qwen" is listed twice'),
        ({"entries": []}, "entries: Extra inputs are not permitted"),
        (["a list"], "the catalog is not a mapping: write `models:`"),
    ],
)  # fmt: skip
def test_a_bad_catalog_is_refused_with_one_line_saying_where(document: Any, message: str) -> None:
    said = refusal(document)
    assert message in said and "\n" not in said


def test_the_variant_follows_the_ask_then_the_runtime_then_the_gpus() -> None:
    (found,) = parse_catalog(
        {"models": [entry(variants={"cpu": {}, "gpu": {"source": HF, "format": "hf"}})]}
    ).models
    assert found.pick("gpu", gpus=0, runtime="llamacpp") == "gpu"  # asked: even if it won't fit
    assert found.pick(None, gpus=1, runtime="llamacpp") == "cpu"  # the gguf one
    assert found.pick(None, gpus=0, runtime="vllm") == "gpu"  # the hf one
    assert found.pick(None, gpus=1, runtime="generic") == "gpu"
    assert found.pick(None, gpus=0, runtime="generic") == "cpu"
    (cpu_only,) = parse_catalog({"models": [entry()]}).models
    assert cpu_only.pick("gpu", gpus=1, runtime="llamacpp") is None
    assert cpu_only.pick(None, gpus=1, runtime="llamacpp") == "cpu"


def deployment(model: dict[str, Any]) -> ModelDeploymentSpec:
    return ModelDeploymentSpec.model_validate({"model": model, "runtime": {"llamacpp": {}}})


def test_a_deployment_naming_a_catalog_entry_serves_the_model_of_that_name() -> None:
    spec = deployment({"catalog": {"name": "qwen", "compute": "gpu"}})
    assert spec.named_model == ModelRef(name="qwen")
    assert spec.inline_model is None
    inline = deployment({"source": GGUF, "format": "gguf"})
    assert inline.named_model is None and inline.inline_model is not None


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"catalog": {"name": "qwen"}, "format": "gguf"}, "model: catalog: names a catalog entry"),
        ({"catalog": {"name": "qwen"}, "source": GGUF}, "set exactly one of catalog and source"),
        ({}, "set exactly one of catalog and source"),
        ({"source": GGUF}, "model: format: required with source"),
        ({"catalog": {"name": "qwen", "compute": "tpu"}}, "model.catalog.compute"),
        ({"catalog": {}}, "model.catalog.name"),
    ],
)  # fmt: skip
def test_a_bad_catalog_reference_is_refused_naming_the_field(
    model: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        deployment(model)
    assert message in str(caught.value).replace("\n  Value error, ", ": ")


def test_the_inline_models_rules_hold_only_without_a_catalog_in_the_crd() -> None:
    schema = object_schema(ModelDeploymentSpec)
    assert violations(schema) == []
    model = schema["properties"]["model"]
    rules = [r["rule"] for r in model["x-kubernetes-validations"]]
    assert rules[0] == "has(self.catalog) != has(self.source)"
    assert all(r.startswith("!has(self.source) || !has(self.format) || (") for r in rules[3:])
    assert model["properties"]["catalog"]["required"] == ["name"]
