"""The pure decisions of the Batch API: which template serves a model, what a batch's objects
are, and which status a run shows as.

Real: the functions, on plain dicts shaped as the API server returns them. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from batchapi.errors import ApiFailure
from batchapi.lifecycle import batch_object, batch_status
from batchapi.manifests import NewBatch, batch_of, config_manifest, run_manifest
from batchapi.templates import MODEL_ANNOTATION, find_templates, pick

Obj = dict[str, Any]


def config(name: str, model: Obj, *, annotation: str = "m", **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "annotations": {MODEL_ANNOTATION: annotation}},
        "spec": {"model": model, **spec},
    }


def deployment(
    name: str, *, annotation: str = "m", served: str | None = "m", protocol: str = "openai-chat"
) -> Obj:
    status = {"protocol": protocol, **({"modelName": served} if served else {})}
    return {
        "metadata": {"name": name, "annotations": {MODEL_ANNOTATION: annotation}},
        "status": status,
    }


URL_MODEL = {"protocol": "openai-chat", "url": "http://llm/v1", "name": "m"}


def refusal(found: dict[str, Any], model: str = "m") -> str:
    with pytest.raises(ApiFailure) as refused:
        pick(model, found)
    assert refused.value.status == 400
    return refused.value.message


def test_an_annotated_config_or_deployment_serves_its_model() -> None:
    assert pick("m", find_templates([config("c", URL_MODEL)], [])).ref == "InferenceConfig/c"
    assert pick("m", find_templates([], [deployment("d")])).ref == "ModelDeployment/d"
    assert pick("m", find_templates([], [deployment("d", served=None)])).ref  # not ready yet


def test_a_mapping_the_runner_would_refuse_is_named() -> None:
    wrong_name = find_templates([config("c", {**URL_MODEL, "name": "other"})], [])
    assert "calls model 'other' (spec.model.name)" in refusal(wrong_name)
    tensor = find_templates(
        [config("c", {"protocol": "kserve-v2", "url": "http://x", "name": "m"})], []
    )
    assert "not an OpenAI protocol" in refusal(tensor)
    served = find_templates([], [deployment("d", served="tiny")])
    assert "serves model 'tiny' (status.modelName)" in refusal(served)
    by_ref = find_templates(
        [config("c", {"deploymentRef": {"name": "d"}})],
        [deployment("d", annotation="", served="tiny")],
    )
    assert "serves model 'tiny'" in refusal(by_ref)


def test_an_unknown_or_twice_named_model_is_refused_naming_what_exists() -> None:
    found = find_templates([config("c", URL_MODEL)], [deployment("d", annotation="n", served="n")])
    assert "Models in this namespace: m, n." in refusal(found, "gpt-4o")
    twice = find_templates([config("c", URL_MODEL)], [deployment("d")])
    assert "named by InferenceConfig/c and ModelDeployment/d" in refusal(twice)


def new_batch(**changes: Any) -> NewBatch:
    fields: dict[str, Any] = dict(
        batch_id="batch_" + "a" * 32,
        namespace="ns",
        endpoint="/v1/chat/completions",
        input_file_id="file-x",
        completion_window="24h",
        timeout_seconds=86400,
        model="m",
        requests=3,
        output_file_id="file-o",
        error_file_id="file-e",
        template="InferenceConfig/c",
        metadata={"k": "v"},
    )
    return NewBatch(**{**fields, **changes})


def test_a_batch_is_stored_on_its_run_and_read_back() -> None:
    batch = new_batch()
    run = run_manifest(batch)
    assert run["metadata"]["name"] == "batch-" + "a" * 32
    assert batch_of(run) == batch
    failed = run_manifest(new_batch(errors=[{"code": "x", "line": 1}]))
    assert failed["spec"]["cancel"] is True and batch_of(failed).errors == [
        {"code": "x", "line": 1}
    ]


def test_the_config_takes_the_templates_settings_and_the_batchs_storage() -> None:
    template = pick(
        "m",
        find_templates(
            [
                config(
                    "c",
                    {**URL_MODEL, "promptField": "q", "systemPrompt": "Be brief.", "maxTokens": 5},
                    storage={"input": {"file": {"path": "/t"}}},
                    allowedNamespaces=["other"],
                    autoDeletePolicy="DeleteOnCompletion",
                    runner={"maxFailedRecords": 0},
                )
            ],
            [],
        ),
    )
    storage = {"input": {"file": {"path": "/in"}}, "output": {}, "errors": {}}
    made = config_manifest(new_batch(), template, run_uid="uid-1", storage=storage)
    spec = made["spec"]
    assert spec["model"] == URL_MODEL and spec["storage"] == storage
    assert "allowedNamespaces" not in spec and spec["autoDeletePolicy"] == "None"
    assert spec["runner"] == {"maxFailedRecords": 0, "maxFailedRatio": 1}
    assert made["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    own_ratio = pick(
        "m", find_templates([config("c", URL_MODEL, runner={"maxFailedRatio": 0.1})], [])
    )
    assert (
        config_manifest(new_batch(), own_ratio, run_uid="u", storage=storage)["spec"]["runner"][
            "maxFailedRatio"
        ]
        == 0.1
    )
    from_deployment = pick("m", find_templates([], [deployment("d")]))
    made = config_manifest(new_batch(), from_deployment, run_uid="u", storage=storage)
    assert made["spec"]["model"] == {"deploymentRef": {"name": "d"}}


def run_with(phase: str = "", *, cancel: bool = False, reason: str = "") -> Obj:
    run = run_manifest(new_batch())
    run["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    run["spec"]["cancel"] = cancel
    status: Obj = {"phase": phase} if phase else {}
    if reason:
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason}]
    run["status"] = status
    return run


@pytest.mark.parametrize(
    ("run", "recorded", "expected"),
    [
        (run_with(), False, "validating"),
        (run_with("Pending"), False, "validating"),
        (run_with("Running"), False, "in_progress"),
        (run_with("Suspended"), False, "in_progress"),
        (run_with("Running", cancel=True), False, "cancelling"),
        (run_with("Succeeded"), False, "finalizing"),
        (run_with("Succeeded"), True, "completed"),
        (run_with("Cancelled", cancel=True), True, "cancelled"),
        (run_with("Failed", reason="DeadlineExceeded"), True, "expired"),
        (run_with("Failed", reason="BackoffLimitExceeded"), True, "failed"),
    ],
)
def test_a_runs_phase_is_a_batch_status(run: Obj, recorded: bool, expected: str) -> None:
    assert batch_status(run, recorded=recorded) == expected


def test_counts_come_from_progress_then_from_the_files() -> None:
    run = run_with("Running")
    run["status"]["progress"] = {"recordsWritten": 4, "recordsFailed": 1}
    assert batch_object(run, lines=None)["request_counts"] == {
        "total": 3,
        "completed": 4,
        "failed": 1,
    }
    done = run_with("Cancelled", cancel=True)
    done["status"].update(
        completionTime="2026-01-01T00:10:00Z", result={"recordsWritten": 1, "recordsFailed": 0}
    )
    made = batch_object(done, lines={"output": 2})
    assert made["request_counts"] == {"total": 3, "completed": 2, "failed": 0}
    assert made["output_file_id"] == "file-o" and made["error_file_id"] is None
    assert made["cancelled_at"] == made["created_at"] + 600
