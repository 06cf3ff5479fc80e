"""The CEL rules (`x-kubernetes-validations`) of longrun's CRDs, each broken once, on both
backends; and the transition rules that make a one-shot run's spec immutable.

Real: both backends with the CRDs from charts/longrun/crds. Faked: nothing. The emulator
evaluates a subset of CEL (e2e/emulator/cel.py) and skips rules it cannot read; this suite
proves it reads every rule we ship, and `test_every_rule_has_a_case` keeps it so.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from contracts.auth import ONE_CREDENTIAL
from contracts.concurrency import AUTO_ONLY, CONCURRENCY_RANGE, INITIAL_ABOVE_MAX
from contracts.run import CANCEL_FINAL_MESSAGE, CANCEL_ONE_SHOT_MESSAGE, ONE_SHOT_FIXED_MESSAGE
from tests.fidelity.conftest import GROUP, VERSION, Cluster
from tests.fidelity.divergences import as_real_server_says

CRDS = Path(__file__).resolve().parents[2] / "charts" / "longrun" / "crds"
CONFIG = {
    "model": {"protocol": "kserve-v2", "url": "http://iris:8080", "name": "iris"},
    "storage": {"input": {"file": {"path": "/in.jsonl"}}, "output": {"file": {"path": "/out"}}},
}
SQL_URL = "postgresql://db/x"
SQL_URL_WITH_PASSWORD = "postgresql://scott:tiger@db/x"
PAGINATION = {"mode": "page"}
ONE_OF_MODEL = "set exactly one of model and kserve (kserve is Krateo's alias of model)"
ONE_OF_URL = "set exactly one of url and urlSecretRef"
NO_PASSWORD = "url must not contain a password; put the URL in a Secret and use urlSecretRef"
OUT_SQL = "sql: output needs `table` and takes no `query`"
OUT_S3 = "s3: output needs `prefix` (one object per chunk) and takes no `key`"
OUT_HTTP = "http: pagination applies to input only"
OUT_RECORD_FIELD = "recordField applies to input only (it reads back an earlier run's error output)"


def _storage(where: str, value: dict[str, Any]) -> dict[str, Any]:
    """A spec patch making `value` the storage kind at `where` (one kind per place)."""
    return {"storage": {where: {"file": None, **value}}}


def _output_cases(where: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """`errors` takes what `output` takes: the same rules at two places."""
    at = f"spec.storage.{where}"
    return [
        (at, f".spec.storage.{where}", OUT_SQL,
         _storage(where, {"sql": {"url": SQL_URL, "query": "select 1"}})),
        (at, f".spec.storage.{where}", OUT_S3,
         _storage(where, {"s3": {"bucket": "abc", "key": "k"}})),
        (at, f".spec.storage.{where}", OUT_HTTP,
         _storage(where, {"http": {"url": "http://x", "pagination": PAGINATION}})),
        (at, f".spec.storage.{where}", OUT_RECORD_FIELD,
         _storage(where, {"file": {"path": "/out", "recordField": "input"}})),
        (f"{at}.sql", f".spec.storage.{where}.sql", ONE_OF_URL,
         _storage(where, {"sql": {"table": "t"}})),
        (f"{at}.sql", f".spec.storage.{where}.sql", NO_PASSWORD,
         _storage(where, {"sql": {"table": "t", "url": SQL_URL_WITH_PASSWORD}})),
    ]  # fmt: skip


# (field the error names, schema path of the rule, its message, spec patch breaking it)
CONFIG_CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("spec", ".spec", ONE_OF_MODEL, {"model": None}),
    ("spec.model", ".spec.model", "set exactly one of url and deploymentRef",
     {"model": {"url": None}}),
    ("spec.model", ".spec.model", "url: needs protocol and name", {"model": {"name": None}}),
    ("spec.model", ".spec.model",
     "deploymentRef: takes protocol, name and tls from the deployment; leave them out",
     {"model": {"url": None, "deploymentRef": {"name": "served"}}}),
    ("spec.model.auth", ".spec.model.auth", ONE_CREDENTIAL,
     {"model": {"auth": {"secretRef": {"name": "k", "key": "v"},
                         "serviceAccountToken": {"audience": "models.example"}}}}),
    ("spec.model.auth", ".spec.model.auth", ONE_CREDENTIAL,
     {"model": {"auth": {"header": "X-API-Key"}}}),
    ("spec.pod.env[0]", ".spec.pod.env[]", "set exactly one of value and secretKeyRef",
     {"pod": {"env": [{"name": "T", "value": "a", "secretKeyRef": {"name": "s", "key": "k"}}]}}),
    ("spec.storage.input", ".spec.storage.input", "sql: set exactly one of table and query",
     _storage("input", {"sql": {"url": SQL_URL}})),
    ("spec.storage.input", ".spec.storage.input", "s3: set exactly one of key and prefix",
     _storage("input", {"s3": {"bucket": "abc"}})),
    ("spec.storage.input.sql", ".spec.storage.input.sql", ONE_OF_URL,
     _storage("input", {"sql": {"table": "t"}})),
    ("spec.storage.input.sql", ".spec.storage.input.sql", NO_PASSWORD,
     _storage("input", {"sql": {"table": "t", "url": SQL_URL_WITH_PASSWORD}})),
    *_output_cases("output"),
    *_output_cases("errors"),
    ("spec.runner", ".spec.runner", CONCURRENCY_RANGE, {"runner": {"concurrency": 300}}),
    ("spec.runner", ".spec.runner", AUTO_ONLY,
     {"runner": {"concurrency": 8, "maxConcurrency": 16}}),
    ("spec.runner", ".spec.runner", INITIAL_ABOVE_MAX,
     {"runner": {"concurrency": "auto", "maxConcurrency": 4, "initialConcurrency": 8}}),
]  # fmt: skip
RUN_CASES = [("spec", ".spec", "timeZone needs schedule",
              {"configRef": {"name": "iris"}, "timeZone": "UTC"}),
             ("spec", ".spec", CANCEL_ONE_SHOT_MESSAGE,
              {"configRef": {"name": "iris"}, "schedule": "0 2 * * *",
               "cancel": True})]  # fmt: skip
# The serving CRDs (Model, ModelDeployment) are not covered yet: add their cases here.
KINDS = ("InferenceConfig", "InferenceRun")


# Transition rules: only an update can break them (see the tests at the end).
SCHEDULE_FIXED = (
    "spec.schedule cannot be added or removed after creation; create a new InferenceRun"
)
ONE_SHOT_FIXED = ONE_SHOT_FIXED_MESSAGE
TRANSITION_RULES = {
    ("InferenceRun", ".spec", SCHEDULE_FIXED),
    ("InferenceRun", ".spec", ONE_SHOT_FIXED),
    ("InferenceRun", ".spec", CANCEL_FINAL_MESSAGE),
}


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): None removes a key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _rules_in_crds() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()

    def walk(kind: str, node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        for rule in node.get("x-kubernetes-validations") or []:
            found.add((kind, path, rule["message"]))
        for key, sub in (node.get("properties") or {}).items():
            walk(kind, sub, f"{path}.{key}")
        walk(kind, node.get("items"), f"{path}[]")
        walk(kind, node.get("additionalProperties"), f"{path}.*")

    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            walk(crd["spec"]["names"]["kind"], version["schema"]["openAPIV3Schema"], "")
    return found


def test_every_rule_has_a_case() -> None:
    cases = {("InferenceConfig", rule_path, msg) for _, rule_path, msg, _ in CONFIG_CASES}
    cases |= {("InferenceRun", rule_path, msg) for _, rule_path, msg, _ in RUN_CASES}
    ours = {rule for rule in _rules_in_crds() if rule[0] in KINDS}
    assert ours == cases | TRANSITION_RULES


def _expect_rule_refusal(
    kube: Cluster, kind: str, spec: dict[str, Any], field: str, msg: str
) -> None:
    plural = kind.lower() + "s"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": spec,
    }
    code, status = kube.refusal(
        lambda: kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.ns, plural, body)
    )
    assert code == 422
    causes = [
        (c["field"], as_real_server_says(c["message"], backend=kube.backend))
        for c in status["details"]["causes"]
    ]
    assert (field, f"Invalid value: {msg}") in causes, causes


@pytest.mark.parametrize(("field", "rule_path", "message", "patch"), CONFIG_CASES,
                         ids=[f"{c[1]}:{c[2][:30]}" for c in CONFIG_CASES])  # fmt: skip
def test_config_rule_refuses_what_breaks_it(
    kube: Cluster, field: str, rule_path: str, message: str, patch: dict[str, Any]
) -> None:
    _expect_rule_refusal(kube, "InferenceConfig", _merge(CONFIG, patch), field, message)


def test_run_rule_refuses_what_breaks_it(kube: Cluster) -> None:
    for field, _, message, spec in RUN_CASES:
        _expect_rule_refusal(kube, "InferenceRun", spec, field, message)


def test_a_config_that_keeps_every_rule_is_accepted(kube: Cluster) -> None:
    spec = {**CONFIG, "storage": {
        "input": {"sql": {"urlSecretRef": {"name": "db", "key": "url"}, "query": "select 1"}},
        "output": {"s3": {"bucket": "abc", "prefix": "out/"}},
        "errors": {"sql": {"url": SQL_URL, "table": "errors"}}}}  # fmt: skip
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceConfig",
            "metadata": {"name": "ok"}, "spec": spec}  # fmt: skip
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.ns, "inferenceconfigs", body)


def _patch_run(kube: Cluster, name: str, spec_patch: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns/{name}"
    answer = kube.raw(
        "PATCH", path, {"spec": spec_patch}, content_type="application/merge-patch+json"
    )
    return answer.status, answer.body


def test_a_one_shot_runs_spec_is_immutable(kube: Cluster) -> None:
    kube.create_run("once", {"configRef": {"name": "iris"}})
    code, body = _patch_run(kube, "once", {"parameters": {"day": "monday"}})
    assert code == 422
    assert as_real_server_says(body["message"], backend=kube.backend) == (
        f'InferenceRun.longrun.dev "once" is invalid: spec: Invalid value: {ONE_SHOT_FIXED}'
    )


def test_a_one_shot_run_cannot_gain_a_schedule(kube: Cluster) -> None:
    kube.create_run("once", {"configRef": {"name": "iris"}})
    code, body = _patch_run(kube, "once", {"schedule": "0 2 * * *"})
    assert code == 422
    message = as_real_server_says(body["message"], backend=kube.backend)
    assert message == (
        'InferenceRun.longrun.dev "once" is invalid: ['
        f"spec: Invalid value: {SCHEDULE_FIXED}, spec: Invalid value: {ONE_SHOT_FIXED}]"
    )


def test_a_one_shot_run_may_change_suspend_and_cancel_only(kube: Cluster) -> None:
    kube.create_run("once", {"configRef": {"name": "iris"}, "timeoutSeconds": 60})
    assert _patch_run(kube, "once", {"suspend": True})[0] == 200
    assert _patch_run(kube, "once", {"suspend": False})[0] == 200
    assert _patch_run(kube, "once", {"timeoutSeconds": None})[0] == 422  # removing is a change
    assert _patch_run(kube, "once", {"cancel": True})[0] == 200


def test_a_cancelled_run_stays_cancelled(kube: Cluster) -> None:
    kube.create_run("once", {"configRef": {"name": "iris"}, "cancel": True})
    code, body = _patch_run(kube, "once", {"cancel": False})
    assert code == 422
    assert as_real_server_says(body["message"], backend=kube.backend) == (
        f'InferenceRun.longrun.dev "once" is invalid: spec: Invalid value: {CANCEL_FINAL_MESSAGE}'
    )


def test_a_scheduled_run_can_change_but_keeps_its_schedule(kube: Cluster) -> None:
    kube.create_run("nightly", {"configRef": {"name": "iris"}, "schedule": "0 2 * * *"})
    assert _patch_run(kube, "nightly", {"suspend": True})[0] == 200
    code, body = _patch_run(kube, "nightly", {"schedule": None})
    assert code == 422
    message = as_real_server_says(body["message"], backend=kube.backend)
    assert message == (
        f'InferenceRun.longrun.dev "nightly" is invalid: spec: Invalid value: {SCHEDULE_FIXED}'
    )


def test_metadata_and_status_of_a_one_shot_run_can_change(kube: Cluster) -> None:
    kube.create_run("once", {"configRef": {"name": "iris"}})
    relabel = {"metadata": {"labels": {"a": "b"}}}
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, kube.ns, "inferenceruns", "once", relabel
    )
    status = {"status": {"phase": "Pending"}}
    kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, kube.ns, "inferenceruns", "once", status
    )
