"""The Model and ModelDeployment schemas: what they accept, what they refuse and in which
words, the source URIs, and what the CRD generator will get from them.

Real: the pydantic models, the CRD translation of controller/crds.py and the structural-schema
checker of tests/controller/structural.py. Faked: nothing.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from contracts.base import SecretReference
from contracts.serving import (
    MODEL_DEPLOYMENT_KIND,
    MODEL_KIND,
    SERVING_KINDS,
    SERVING_RESOURCE_MODELS,
    ModelDeploymentSpec,
    ModelSource,
    ModelSpec,
    format_problem,
    parse_source,
)
from controller.crds import object_schema
from tests.controller.structural import violations

GGUF = {"source": "hf://org/repo/model.gguf", "format": "gguf"}
SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def _models() -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo: list[Any] = [m for kind in SERVING_KINDS for m in (kind.spec, kind.status)]
    while todo:
        item = todo.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item not in seen:
                seen.add(item)
                todo.extend(f.annotation for f in item.model_fields.values())
        else:
            todo.extend(typing.get_args(item))
    return seen


def error(model: type[BaseModel], body: dict[str, Any]) -> str:
    """`field.path: message` of the first validation error."""
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    err = info.value.errors()[0]
    where = ".".join(str(p) for p in err["loc"] if "[" not in str(p))
    message = err["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def deployment(**spec: Any) -> dict[str, Any]:
    return {"model": dict(GGUF), "runtime": {"llamacpp": {}}, **spec}


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [
        ("s3://models/iris/model.joblib", ModelSource("s3", "models", "iris/model.joblib")),
        ("s3://models/repo/", ModelSource("s3", "models", "repo/")),
        ("hf://org/repo/sub/m.gguf@v1.0", ModelSource("hf", "org/repo", "sub/m.gguf", "v1.0")),
        ("hf://org/repo@refs/pr/3", ModelSource("hf", "org/repo", "", "refs/pr/3")),
        ("https://host.example/a/m.gguf", ModelSource("https", "host.example", "a/m.gguf")),
        ("pvc://model-store/llama/m.gguf", ModelSource("pvc", "model-store", "llama/m.gguf")),
    ],
)
def test_parses_every_source_form(uri: str, parsed: ModelSource) -> None:
    assert parse_source(uri) == parsed


def test_tells_which_sources_are_directories() -> None:
    assert parse_source("s3://models/repo/").is_directory
    assert parse_source("hf://org/repo").is_directory
    assert not parse_source("hf://org/repo/m.gguf").is_directory
    assert parse_source("hf://org/repo/dir/m.gguf").file_name == "m.gguf"


BAD_SOURCES = {
    "ftp://h/m.gguf": "'ftp://h/m.gguf' is not a model source: use s3://bucket/key, "
    "hf://org/repo[/file][@revision], https://host/path or pvc://claim/path",
    "s3://ab/key": "'s3://ab/key' is not a s3:// source: use s3://bucket/key, with a bucket "
    "name of 3 to 63 characters (a-z, 0-9, '.', '-')",
    "hf://org": "'hf://org' is not a hf:// source: use hf://org/repo, hf://org/repo/file or "
    "either with @revision",
    "pvc://Models/m": "'pvc://Models/m' is not a pvc:// source: use pvc://claim/path, with the "
    "lowercase name of a PersistentVolumeClaim",
    "s3://models/../etc/passwd": "'s3://models/../etc/passwd': a source path may not contain '..'",
    "https://me:pw@host/m.gguf": "a source must not contain credentials (user:password@): put "
    "them in a Secret and name it in credentials",
}


@pytest.mark.parametrize(("uri", "message"), BAD_SOURCES.items())
def test_refuses_bad_sources_saying_what_to_write(uri: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_source(uri)
    assert str(info.value) == message


def test_a_model_defaults_its_task_from_its_format() -> None:
    assert ModelSpec.model_validate(GGUF).resolved_task() == "chat-completion"
    iris = ModelSpec.model_validate({"source": "s3://models/m.joblib", "format": "sklearn"})
    assert iris.resolved_task() == "predict"


BAD_MODELS: list[tuple[dict[str, Any], str]] = [
    (
        {"source": "http://h/m.gguf", "format": "gguf"},
        "source: an http:// source needs sha256 (plain HTTP is not authenticated); set sha256 "
        "or use https://",
    ),
    ({**GGUF, "sha256": "abc"}, "sha256: must be a SHA-256 digest: 64 hexadecimal digits"),
    ({**GGUF, "endpointUrl": "http://minio:9000"}, "endpointUrl: applies to s3:// sources only"),
    (
        {"source": "pvc://c/m.gguf", "format": "gguf", "credentials": {"name": "x"}},
        "credentials: a pvc:// source is mounted, not downloaded, so it takes none",
    ),
    (
        {"source": "s3://models/r/", "format": "triton-repository", "sha256": SHA},
        "sha256: checks one file, but the source is a directory",
    ),
    (
        {"source": "pvc://c/repository", "format": "triton-repository", "sha256": SHA},
        "sha256: checks one file, but the source is a directory",
    ),
    (
        {"source": "pvc://c/models/", "format": "gguf", "sha256": SHA},
        "sha256: checks one file, but the source is a directory",
    ),
    (
        {"source": "s3://models/r.onnx", "format": "triton-repository"},
        "source: format triton-repository needs a directory: s3://bucket/prefix/, hf://org/repo "
        "or pvc://claim/path",
    ),
    (
        {"source": "hf://org/repo", "format": "gguf"},
        "source: format gguf needs a source naming one file, not a directory",
    ),
    (
        {**GGUF, "task": "predict"},
        "task: format gguf serves chat-completion, completion or embeddings",
    ),
    (
        {"source": "s3://models/m.onnx", "format": "onnx", "task": "embeddings"},
        "task: format onnx serves predict only",
    ),
]


@pytest.mark.parametrize(("body", "message"), BAD_MODELS)
def test_a_model_refuses_what_cannot_be_fetched_or_served_naming_the_field(
    body: dict[str, Any], message: str
) -> None:
    assert error(ModelSpec, body) == message


def test_a_pvc_source_may_be_a_file_or_a_directory_and_carry_a_digest() -> None:
    ModelSpec.model_validate({"source": "pvc://c/m.gguf", "format": "gguf", "sha256": SHA})
    ModelSpec.model_validate({"source": "pvc://c/repository", "format": "triton-repository"})


GENERIC = {"image": "x", "port": 1, "protocol": "openai-chat"}
BAD_DEPLOYMENTS: list[tuple[dict[str, Any], str]] = [
    ({"modelRef": {"name": "m"}}, "set exactly one of modelRef and model"),
    ({"model": None}, "set exactly one of modelRef and model"),
    ({"runtime": {}}, "runtime: set exactly one runtime (found: none)"),
    (
        {"runtime": {"llamacpp": {}, "generic": GENERIC}},
        "runtime: set exactly one runtime (found: llamacpp, generic)",
    ),
    ({"replicas": 1, "idleReplicas": 2}, "idleReplicas: must not exceed replicas"),
    (
        {"replicas": 2, "idleReplicas": 1, "autoscaling": {"maxReplicas": 3}},
        "idleReplicas: with autoscaling it can only be 0 (the autoscaler owns other counts)",
    ),
    (
        {"autoscaling": {"minReplicas": 4, "maxReplicas": 2}},
        "autoscaling: minReplicas must not exceed maxReplicas",
    ),
    (
        {"endpoint": {"tls": {"issuerRef": {"name": "ca"}}}},
        "endpoint: tls needs ingress (the certificate is for its host)",
    ),
    (
        {"cache": {"accessMode": "ReadWriteMany"}},
        "cache: storageClassName and accessMode apply to storage pvc only",
    ),
    (
        {"runtime": {"llamacpp": {"extraArgs": ["--host=1.2.3.4"]}}},
        "runtime.llamacpp.extraArgs: '--host' is not allowed: listen address: longrun sets it, "
        "and the auth wiring depends on it; remove it from extraArgs",
    ),
    (
        {"runtime": {"kserve": {}}},
        "model.format: runtime kserve serves format sklearn or xgboost, not gguf",
    ),
    ({"resources": {"gpu": 17}}, "resources.gpu: Input should be less than or equal to 16"),
]


@pytest.mark.parametrize(("spec", "message"), BAD_DEPLOYMENTS)
def test_a_deployment_refuses_inconsistent_settings_naming_the_field(
    spec: dict[str, Any], message: str
) -> None:
    assert error(ModelDeploymentSpec, deployment(**spec)) == message


def test_a_deployment_fills_in_its_defaults() -> None:
    spec = ModelDeploymentSpec.model_validate(deployment())
    assert (spec.replicas, spec.idle_replicas, spec.scale_down_delay_seconds) == (1, None, 600)
    assert spec.auth.enabled and spec.auth.key_count == 1
    assert (spec.cache.storage, spec.cache.retain_policy) == ("emptyDir", "Delete")
    assert (spec.endpoint.service_type, spec.endpoint.port) == ("ClusterIP", 8080)
    assert spec.runtime.kind == "llamacpp" and not spec.is_on_demand


def test_on_demand_means_idle_replicas_is_set() -> None:
    assert ModelDeploymentSpec.model_validate(deployment(idleReplicas=0)).is_on_demand


FITS: list[tuple[str, str, str, str | None]] = [
    ("llamacpp", "gguf", "embeddings", None),
    (
        "llamacpp",
        "gguf",
        "predict",
        "runtime llamacpp serves chat-completion, completion, embeddings, not predict",
    ),
    ("triton", "onnx", "predict", None),
    (
        "triton",
        "sklearn",
        "predict",
        "runtime triton serves format onnx or triton-repository, not sklearn",
    ),
    ("mlserver", "xgboost", "predict", None),
    ("generic", "onnx", "predict", None),
]


@pytest.mark.parametrize(("runtime", "format_", "task", "problem"), FITS)
def test_runtimes_serve_their_formats_and_tasks(
    runtime: str, format_: str, task: str, problem: str | None
) -> None:
    assert format_problem(runtime, format_, task) == problem


@pytest.mark.parametrize("model", sorted(_models(), key=lambda m: m.__name__), ids=str)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    missing = [name for name, f in model.model_fields.items() if not f.description]
    assert not missing, f"{model.__name__} fields without description: {missing}"


def test_the_model_credentials_are_a_secret_reference() -> None:
    spec = ModelSpec.model_validate(
        {"source": "s3://models/m.gguf", "format": "gguf", "credentials": {"name": "s3"}}
    )
    assert isinstance(spec.credentials, SecretReference)


@pytest.mark.parametrize("kind", SERVING_KINDS, ids=lambda k: k.kind)
def test_schemas_translate_to_structural_crd_schemas(kind: Any) -> None:
    for model in (kind.spec, kind.status):
        assert violations(object_schema(model)) == []


def test_cel_rules_travel_with_the_schema() -> None:
    schema = object_schema(ModelDeploymentSpec)
    rules = [r["message"] for r in schema["x-kubernetes-validations"]]
    assert "set exactly one of modelRef and model" in rules
    runtime = schema["properties"]["runtime"]
    assert (runtime["minProperties"], runtime["maxProperties"]) == (1, 1)
    source = schema["properties"]["model"]["x-kubernetes-validations"]
    assert any("sha256" in r["message"] for r in source)
    assert schema["properties"]["endpoint"]["default"] == {}


def test_kinds_carry_what_the_crd_generator_needs() -> None:
    assert (MODEL_KIND.kind, MODEL_KIND.plural, MODEL_KIND.short_name) == ("Model", "models", "mdl")
    info = MODEL_DEPLOYMENT_KIND
    assert (info.kind, info.plural, info.short_name, info.categories) == (
        "ModelDeployment",
        "modeldeployments",
        "mdep",
        ("longrun",),
    )
    columns = [(c.name, c.json_path) for c in info.columns if c.priority == 0]
    assert columns == [
        ("Phase", ".status.phase"),
        ("Model", ".status.modelName"),
        ("Runtime", ".status.runtime"),
        ("Ready", ".status.readyText"),
        ("Endpoint", ".status.endpoint"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    assert set(SERVING_RESOURCE_MODELS) == {"Model", "ModelDeployment"}


def test_whole_objects_validate_with_their_envelope() -> None:
    doc = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "chat"},
        "spec": deployment(),
    }
    assert (
        SERVING_RESOURCE_MODELS["ModelDeployment"].model_validate(doc).spec.runtime.kind
        == "llamacpp"
    )
