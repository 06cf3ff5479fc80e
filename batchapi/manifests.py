"""A batch as Kubernetes objects: its InferenceRun, and the InferenceConfig that run uses.

Pure builders (batch in -> manifests out). Everything a batch is lives on its run: the
label that makes it a batch, and annotations with the request (endpoint, input file, window,
metadata, model), the ids given to its output and error files, the template it runs with and
the request count the upload's check found. So any server replica, or one restarted after a
crash, reads a batch from the cluster alone, and rebuilds the run's config from it when the
config is missing (the server died between the two creations; `config_manifest` is
deterministic).

The config is owned by the run (deleting the run deletes it), takes the template's model,
runner and pod settings, and the batch's storage: the uploaded file as `openai-batch` input,
the output and error locations as outputs. Settings that build request bodies are dropped
(each line carries its own body), the run is never deleted automatically (the batch must stay
readable), and failed lines do not fail the run (`maxFailedRatio: 1`, OpenAI's behaviour)
unless the template sets a ratio of its own.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from batchapi.ids import run_name
from batchapi.templates import Template
from contracts.llm import BODY_SETTINGS
from contracts.resources import API_VERSION

Obj = dict[str, Any]
BATCH_LABEL = "longrun.dev/batch-api"  # value: BATCH_LABEL_VALUE; what makes a run a batch
BATCH_LABEL_VALUE = "v1"
PREFIX = "batch.longrun.dev/"
ENDPOINT, INPUT_FILE, WINDOW = PREFIX + "endpoint", PREFIX + "input-file-id", PREFIX + "window"
OUTPUT_FILE, ERROR_FILE = PREFIX + "output-file-id", PREFIX + "error-file-id"
MODEL, METADATA, TEMPLATE = PREFIX + "model", PREFIX + "metadata", PREFIX + "template"
TOTAL, ERRORS, CREATED_BY = PREFIX + "requests", PREFIX + "errors", PREFIX + "created-by"
CANCELLING_AT = PREFIX + "cancelling-at"
MAX_KEPT_ERRORS = 100  # errors.data shown on a failed batch (annotations are small)


@dataclass(frozen=True)
class NewBatch:
    """What a batch is made of, before and after it is stored on its run."""

    batch_id: str
    namespace: str
    endpoint: str
    input_file_id: str
    completion_window: str
    timeout_seconds: int
    model: str
    requests: int
    output_file_id: str
    error_file_id: str
    template: str = ""  # Kind/name; "" for a batch that failed validation
    created_by: str = ""
    metadata: dict[str, str] | None = None
    errors: list[Obj] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The run's (and its config's) name."""
        return run_name(self.batch_id)


def run_manifest(batch: NewBatch) -> Obj:
    """The batch's InferenceRun. A batch whose file failed validation is created cancelled
    (it never runs), with the errors on it."""
    annotations = {
        ENDPOINT: batch.endpoint,
        INPUT_FILE: batch.input_file_id,
        WINDOW: batch.completion_window,
        MODEL: batch.model,
        TOTAL: str(batch.requests),
        OUTPUT_FILE: batch.output_file_id,
        ERROR_FILE: batch.error_file_id,
        TEMPLATE: batch.template,
        CREATED_BY: batch.created_by,
    }
    if batch.metadata is not None:
        annotations[METADATA] = json.dumps(batch.metadata, sort_keys=True)
    spec: Obj = {"configRef": {"name": batch.name}, "timeoutSeconds": batch.timeout_seconds}
    if batch.errors:
        annotations[ERRORS] = json.dumps(batch.errors[:MAX_KEPT_ERRORS])
        spec["cancel"] = True
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceRun",
        "metadata": {
            "name": batch.name,
            "namespace": batch.namespace,
            "labels": {BATCH_LABEL: BATCH_LABEL_VALUE},
            "annotations": annotations,
        },
        "spec": spec,
    }


def batch_of(run: Obj) -> NewBatch:
    """The batch a run stores (the inverse of run_manifest)."""
    meta = run.get("metadata") or {}
    notes = meta.get("annotations") or {}
    metadata = json.loads(notes[METADATA]) if notes.get(METADATA) else None
    return NewBatch(
        batch_id="batch_" + str(meta.get("name", "")).removeprefix("batch-"),
        namespace=str(meta.get("namespace") or ""),
        endpoint=notes.get(ENDPOINT, ""),
        input_file_id=notes.get(INPUT_FILE, ""),
        completion_window=notes.get(WINDOW, ""),
        timeout_seconds=int((run.get("spec") or {}).get("timeoutSeconds") or 0),
        model=notes.get(MODEL, ""),
        requests=int(notes.get(TOTAL) or 0),
        output_file_id=notes.get(OUTPUT_FILE, ""),
        error_file_id=notes.get(ERROR_FILE, ""),
        template=notes.get(TEMPLATE, ""),
        created_by=notes.get(CREATED_BY, ""),
        metadata=metadata,
        errors=json.loads(notes[ERRORS]) if notes.get(ERRORS) else [],
    )


def config_manifest(batch: NewBatch, template: Template, *, run_uid: str, storage: Obj) -> Obj:
    """The run's InferenceConfig: the template's settings with the batch's storage
    (`{"input", "output", "errors"}` blocks), owned by the run."""
    if template.kind == "ModelDeployment":
        spec: Obj = {"model": {"deploymentRef": {"name": template.name}}}
    else:
        spec = copy.deepcopy(template.spec)
        spec.pop("allowedNamespaces", None)
        model = spec.get("model") or {}
        for _attr, name in BODY_SETTINGS:
            model.pop(name, None)
    spec["storage"] = storage
    spec["autoDeletePolicy"] = "None"
    runner = dict(spec.get("runner") or {})
    if runner.get("maxFailedRatio") is None:
        runner["maxFailedRatio"] = 1
    spec["runner"] = runner
    owner = {
        "apiVersion": API_VERSION,
        "kind": "InferenceRun",
        "name": batch.name,
        "uid": run_uid,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceConfig",
        "metadata": {
            "name": batch.name,
            "namespace": batch.namespace,
            "labels": {BATCH_LABEL: BATCH_LABEL_VALUE},
            "annotations": {TEMPLATE: template.ref},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def failed_patch(code: str, message: str) -> Obj:
    """The merge patch that fails a batch which cannot run (its config was refused): the run
    is cancelled before it starts, with the reason as the batch's `errors`."""
    error = {"code": code, "message": message, "param": None, "line": None}
    return {"metadata": {"annotations": {ERRORS: json.dumps([error])}}, "spec": {"cancel": True}}


def cancel_patch(now: int) -> Obj:
    """The merge patch that cancels a batch's run (keeping what it committed)."""
    return {"metadata": {"annotations": {CANCELLING_AT: str(now)}}, "spec": {"cancel": True}}
