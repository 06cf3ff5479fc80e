"""CRD schema validation, defaulting and pruning of longrun's CRDs, on both backends.

Real: both backends with the CRDs from charts/longrun/crds, the official Python client,
every file of testdata/invalid/. Faked: nothing. What kube-apiserver answers for each
invalid file is recorded in golden/invalid_testdata.json; on the real backend the test
checks that record (and rewrites it with LONGRUN_FIDELITY_RECORD=1), on the emulator it
checks the emulator against it, through the known divergences of divergences.py.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from e2e.backends import crd_manifests
from tests.fidelity.conftest import GROUP, VERSION, Cluster, refusal_of
from tests.fidelity.divergences import as_real_server_says

ROOT = Path(__file__).resolve().parents[2]
INVALID = ROOT / "testdata" / "invalid"
EXAMPLES = ROOT / "testdata" / "examples"
GOLDEN = Path(__file__).parent / "golden" / "invalid_testdata.json"
RECORD = "LONGRUN_FIDELITY_RECORD"


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _create(kube: Cluster, doc: dict[str, Any]) -> dict[str, Any]:
    group, _, version = doc["apiVersion"].rpartition("/")
    plural = doc["kind"].lower() + "s"
    return kube.custom.create_namespaced_custom_object(  # type: ignore[no-any-return]
        group, version, kube.ns, plural, doc
    )


def _answer(kube: Cluster, doc: dict[str, Any]) -> list[Any] | None:
    """None when accepted (then deleted again), else [HTTP status, message] as the real
    server would word it."""
    try:
        created = _create(kube, doc)
    except ApiException as exc:
        code, body = refusal_of(exc)
        message = body.get("message", body.get("text", ""))
        return [code, as_real_server_says(message, backend=kube.backend, code=code)]
    group, _, version = doc["apiVersion"].rpartition("/")
    name = created["metadata"]["name"]
    plural = doc["kind"].lower() + "s"
    kube.custom.delete_namespaced_custom_object(group, version, kube.ns, plural, name)
    return None


def test_invalid_testdata_gets_the_real_servers_answers(kube: Cluster) -> None:
    observed: dict[str, list[Any]] = {}
    for path in sorted(INVALID.glob("*.yaml")):  # one after the other: names repeat
        observed[path.name] = [_answer(kube, doc) for doc in _documents(path)]
    if kube.is_real and os.environ.get(RECORD):
        GOLDEN.write_text(json.dumps(observed, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    differing = {
        name: {"expected": expected.get(name), "observed": got}
        for name, got in observed.items()
        if expected.get(name) != got
    }
    assert not differing, (
        json.dumps(differing, indent=1) + f"\nIf the CRDs or testdata changed, re-record on the "
        f"real backend: {RECORD}=1 pytest {Path(__file__).name} -k real"
    )
    assert set(expected) == set(observed), "golden file lists files that no longer exist"


def _run_with_unknown_field() -> dict[str, Any]:
    spec = {"configRef": {"name": "iris"}, "timeout": 60}  # the field is timeoutSeconds
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun",
            "metadata": {"name": "r"}, "spec": spec}  # fmt: skip


def test_unknown_fields_are_pruned_with_a_warning(kube: Cluster) -> None:
    run = _run_with_unknown_field()
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns"
    answer = kube.raw("POST", path, run)
    assert answer.status == 201
    assert "timeout" not in answer.body["spec"]
    assert answer.headers.get("Warning") == '299 - "unknown field \\"spec.timeout\\""'


def test_unknown_fields_are_refused_under_strict_field_validation(kube: Cluster) -> None:
    run = _run_with_unknown_field()
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns"
    answer = kube.raw("POST", path, run, query={"fieldValidation": "Strict"})
    assert (answer.status, answer.body["reason"]) == (400, "BadRequest")
    assert answer.body["message"] == (
        'InferenceRun in version "v1alpha1" cannot be handled as a InferenceRun: '
        'strict decoding error: unknown field "spec.timeout"'
    )


def _missing_defaults(schema: dict[str, Any], sent: Any, stored: Any, path: str) -> list[str]:
    """Where `stored` lacks a schema default that `sent` left out (objects present in both)."""
    if not (isinstance(sent, dict) and isinstance(stored, dict)):
        return []
    wrong = []
    for key, sub in (schema.get("properties") or {}).items():
        given = sent.get(key)
        if "default" in sub and key not in sent:
            given = sub["default"]  # an object default is defaulted further inside
            if not isinstance(given, dict) and stored.get(key) != given:
                wrong.append(f"{path}.{key}: {stored.get(key)!r} != default {given!r}")
        wrong += _missing_defaults(sub, given, stored.get(key), f"{path}.{key}")
    return wrong


def test_defaults_are_filled_in_and_open_subtrees_kept(kube: Cluster) -> None:
    config = next(
        doc
        for doc in _documents(EXAMPLES / "krateo" / "krateo-custom.yaml")
        if doc["kind"] == "InferenceConfig"
    )
    config["metadata"].pop("namespace", None)
    spec = _create(kube, copy.deepcopy(config))["spec"]
    crd = next(c for c in crd_manifests() if c["spec"]["names"]["kind"] == "InferenceConfig")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert not _missing_defaults(schema, config["spec"], spec, "spec")
    assert spec["storage"]["output"]["custom"]["s3"]["moreCustom"] == "data"  # preserved


def test_every_example_is_accepted(kube: Cluster) -> None:
    served = {crd["spec"]["names"]["kind"] for crd in crd_manifests()}
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        for doc in _documents(path):
            if doc["apiVersion"].startswith(GROUP) and doc["kind"] in served:
                doc["metadata"].pop("namespace", None)
                _create(kube, doc)
