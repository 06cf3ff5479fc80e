"""The Batches API: create, retrieve, list, cancel, on InferenceRuns.

Create checks the request, reads what the upload's check found in the input file, and either
records a batch that failed validation (a run created cancelled, with OpenAI's `errors`) or
picks the model's template and creates the run, then its config (owned by the run). Retrieve
and list read runs; when a run has finished, its output and error files are recorded in the
store first (their metadata points at the part files the run wrote), so the batch shows
their ids once they can be read. A run whose config is missing (the server died between the
two creations) gets it made again when seen.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from batchapi import lifecycle
from batchapi.errors import ApiFailure, bad_request, no_batch
from batchapi.files import Files, limit_of, page
from batchapi.ids import batch_id_of, is_batch_id, new_batch_id, new_file_id, run_name
from batchapi.lines import URLS, FileCheck, batch_errors
from batchapi.manifests import (
    BATCH_LABEL,
    BATCH_LABEL_VALUE,
    NewBatch,
    batch_of,
    cancel_patch,
    config_manifest,
    failed_patch,
    run_manifest,
)
from batchapi.ports import Cluster
from batchapi.settings import MAX_WINDOW_HOURS
from batchapi.store import FileMeta
from batchapi.templates import Template, find_templates, pick
from controller.core.ports import ApiError

log = logging.getLogger("longrun.batchapi")
Obj = dict[str, Any]
WINDOW = re.compile(r"^([1-9][0-9]{0,3})h$")
SELECTOR = f"{BATCH_LABEL}={BATCH_LABEL_VALUE}"
LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT = 100, 20
METADATA_KEYS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512


class Batches:
    """The Batches endpoints of one server, on a cluster and the files."""

    def __init__(
        self, cluster: Cluster, files: Files, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.cluster = cluster
        self.files = files
        self.store = files.store
        self.clock = clock

    # -- create ---------------------------------------------------------------------------
    def create(self, namespace: str, body: Any, *, user: str) -> Obj:
        """POST /v1/batches."""
        request = _request(body)
        meta = self.files.get(namespace, request["input_file_id"])
        if meta.purpose != "batch" or meta.check is None:
            raise bad_request(
                f"File {meta.id} has purpose {meta.purpose}; a batch reads a file uploaded "
                "with purpose batch.",
                param="input_file_id",
            )
        check = FileCheck.from_wire(meta.check)
        errors = [e.wire() for e in batch_errors(check, endpoint=request["endpoint"])]
        now = self.clock()
        batch = NewBatch(
            batch_id=new_batch_id(),
            namespace=namespace,
            endpoint=request["endpoint"],
            input_file_id=meta.id,
            completion_window=request["completion_window"],
            timeout_seconds=request["hours"] * 3600,
            model=next(iter(sorted(check.models, key=check.models.__getitem__)), ""),
            requests=check.requests,
            output_file_id=new_file_id(now),
            error_file_id=new_file_id(now),
            created_by=user,
            metadata=request.get("metadata"),
            errors=errors,
        )
        if errors:
            return self._object(self.cluster.create_run(namespace, run_manifest(batch)))
        template = pick(batch.model, self._templates(namespace))
        batch = NewBatch(**{**batch.__dict__, "template": template.ref})
        run = self.cluster.create_run(namespace, run_manifest(batch))
        return self._object(self._configure(run, template))

    def _configure(self, run: Obj, template: Template) -> Obj:
        """Create the run's config; the run, failed when the API server refuses the config
        (the template cannot be run), as it was when the API server did not answer (the
        config is made again when the batch is next read)."""
        try:
            self._create_config(run, template)
        except ApiError as exc:
            if exc.status in (400, 422):
                message = f"{template.ref} cannot run this batch: {exc.message}"
                patch = failed_patch("invalid_template", message)
                return self.cluster.patch_run(
                    run["metadata"]["namespace"], run["metadata"]["name"], patch
                )
            if exc.status not in (0, 429) and exc.status < 500:
                raise
            log.warning("config of %s not created yet: %s", run["metadata"]["name"], exc)
        return run

    def _templates(self, namespace: str) -> dict[str, list[Template]]:
        configs = self.cluster.list_configs(namespace)
        return find_templates(configs, self.cluster.list_deployments(namespace))

    def _create_config(self, run: Obj, template: Template) -> None:
        batch = batch_of(run)
        storage = {
            "input": self.store.runner_input(batch.namespace, batch.input_file_id),
            "output": self.store.runner_output(self._location(batch, "output")),
            "errors": self.store.runner_output(self._location(batch, "errors")),
        }
        uid = str(run["metadata"].get("uid") or "")
        config = config_manifest(batch, template, run_uid=uid, storage=storage)
        try:
            self.cluster.create_config(batch.namespace, config)
        except ApiError as exc:
            if not exc.is_already_exists:
                raise

    def _location(self, batch: NewBatch, role: str) -> str:
        return self.store.location(batch.namespace, batch.batch_id, role)

    # -- read -------------------------------------------------------------------------------
    def get(self, namespace: str, batch_id: str) -> Obj:
        """GET /v1/batches/{id}."""
        return self._object(self._run(namespace, batch_id))

    def list(self, namespace: str, query: dict[str, str]) -> Obj:
        """GET /v1/batches: newest first, `after` a batch id, `limit` 1-100 (default 20)."""
        limit = limit_of(query, default=LIST_LIMIT_DEFAULT, most=LIST_LIMIT_MAX)
        runs = [
            r
            for r in self.cluster.list_runs(namespace, label_selector=SELECTOR)
            if batch_id_of(r["metadata"]["name"])
        ]
        runs.sort(
            key=lambda r: (r["metadata"].get("creationTimestamp") or "", r["metadata"]["name"]),
            reverse=True,
        )
        ids = [batch_id_of(r["metadata"]["name"]) for r in runs]
        after = query.get("after")
        start = (ids.index(after) + 1 if after in ids else len(ids)) if after else 0
        chosen = runs[start : start + limit]
        data = [self._object(run) for run in chosen]
        return page(data, has_more=start + limit < len(runs))

    def cancel(self, namespace: str, batch_id: str) -> Obj:
        """POST /v1/batches/{id}/cancel: the run is cancelled and keeps what it committed."""
        run = self._run(namespace, batch_id)
        state = self._object(run)["status"]
        if state in ("cancelling", "cancelled"):
            return self._object(run)
        if state not in ("validating", "in_progress"):
            raise ApiFailure(409, f"Cannot cancel a batch with status '{state}'.", code="conflict")
        name = run["metadata"]["name"]
        return self._object(
            self.cluster.patch_run(namespace, name, cancel_patch(int(self.clock())))
        )

    def _run(self, namespace: str, batch_id: str) -> Obj:
        run = self.cluster.get_run(namespace, run_name(batch_id)) if is_batch_id(batch_id) else None
        labels = ((run or {}).get("metadata") or {}).get("labels") or {}
        if run is None or labels.get(BATCH_LABEL) != BATCH_LABEL_VALUE:
            raise no_batch(batch_id)
        return run

    def _object(self, run: Obj) -> Obj:
        run = self._repair(run)
        return lifecycle.batch_object(run, lines=self._finalize(run))

    def _finalize(self, run: Obj) -> dict[str, int] | None:
        """Record the output and error files of a finished run (those with lines); their line
        counts, None while the run goes on."""
        batch = batch_of(run)
        if not lifecycle.is_finished(run) or batch.errors:
            return None
        found = {}
        for role, file_id in (("output", batch.output_file_id), ("errors", batch.error_file_id)):
            meta = self.store.get_meta(batch.namespace, file_id)
            if meta is None:
                location = self._location(batch, role)
                lines, size = self.store.count_parts(location)
                if not lines:
                    continue
                suffix = "output" if role == "output" else "error"
                name = f"{batch.batch_id}_{suffix}.jsonl"
                meta = FileMeta(file_id, size, int(self.clock()), name, "batch_output")
                meta.parts, meta.extra = location, {"lines": lines}
                self.store.put_meta(batch.namespace, meta)
            found[role] = int(meta.extra.get("lines") or 0)
        return found

    def _repair(self, run: Obj) -> Obj:
        """Make the config of a run that waits for it (ConfigNotFound) again; the run."""
        batch = batch_of(run)
        if batch.errors or lifecycle.is_finished(run) or not _waits_for_config(run):
            return run
        if self.cluster.get_config(batch.namespace, batch.name) is not None:
            return run
        try:
            template = pick(batch.model, self._templates(batch.namespace))
        except ApiFailure:
            return run  # the template went away: the run stays Pending, its status says why
        return self._configure(run, template)


def _waits_for_config(run: Obj) -> bool:
    for condition in (run.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Accepted" and condition.get("reason") == "ConfigNotFound":
            return True
    return False


def _request(body: Any) -> Obj:
    """The create request's fields, checked; `hours` from completion_window."""
    if not isinstance(body, dict):
        raise bad_request("The request body must be a JSON object.")
    for key in ("input_file_id", "endpoint", "completion_window"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise bad_request(f"Missing required parameter: '{key}'.", param=key)
    if body["endpoint"] not in URLS:
        raise bad_request(
            f"endpoint {body['endpoint']} is not supported; use one of {', '.join(URLS)}.",
            param="endpoint",
        )
    window = WINDOW.match(body["completion_window"])
    if window is None or int(window.group(1)) > MAX_WINDOW_HOURS:
        raise bad_request(
            f"completion_window must be hours from 1h to {MAX_WINDOW_HOURS}h, e.g. 24h.",
            param="completion_window",
        )
    metadata = body.get("metadata")
    if metadata is not None and not _is_metadata(metadata):
        raise bad_request(
            f"metadata must be at most {METADATA_KEYS} string keys of at most "
            f"{METADATA_KEY_CHARS} characters with string values of at most "
            f"{METADATA_VALUE_CHARS}.",
            param="metadata",
        )
    return {**body, "hours": int(window.group(1))}


def _is_metadata(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) > METADATA_KEYS:
        return False
    return all(
        isinstance(k, str)
        and isinstance(v, str)
        and len(k) <= METADATA_KEY_CHARS
        and len(v) <= METADATA_VALUE_CHARS
        for k, v in value.items()
    )
