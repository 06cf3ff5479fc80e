"""From the contract to what a run needs: the validated contract, its plugins, opened.

Why a module of its own: runners/cli.py is about the process (arguments, signals, exit
codes, the summary); this is the part before any record moves. It validates the contract
(a ConfigError naming the field, which the CLI turns into exit 2), resolves the storage
backends and model protocol it names (runners/registry.py), and opens the source, the
two sinks and the model client, each closed with the run's ExitStack.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from contracts.config import RunnerTuning, default_batch_size
from contracts.contract import RunnerContract
from contracts.llm import input_format
from contracts.storage import FileStorage, S3Storage, StorageSpec, check_input, check_output
from contracts.storage_fields import OPENAI_BATCH
from runners import registry
from runners.api import (
    ConfigError,
    ModelClient,
    Record,
    RunContext,
    Sink,
    Source,
    StorageBackend,
)
from runners.formats import UnreadableRecord
from runners.retry import Backoff, call_with_retry
from runners.shards import Shard

T = TypeVar("T")
BATCH_ID_FIELD = "custom_id"


@dataclass
class Opened:
    """Everything a run needs, opened from the contract."""

    ctx: RunContext
    source: Source
    sink: Sink
    error_sink: Sink
    client: ModelClient


def load_contract(path: str) -> RunnerContract:
    """The validated contract at `path`; ConfigError naming the field otherwise."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"contract: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"contract: {path} is not JSON: {exc}") from None
    try:
        contract = RunnerContract.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_validation_line(exc)) from None
    _check_directions(contract)
    return with_batch_output(with_batch_size(contract))


def with_batch_size(contract: RunnerContract) -> RunnerContract:
    """The contract with `runner.batchSize` filled in for its protocol when unset."""
    if contract.runner.batch_size is not None:
        return contract
    size = default_batch_size(contract.model.protocol)
    runner = contract.runner.model_copy(update={"batch_size": size})
    return contract.model_copy(update={"runner": runner})


def with_batch_output(contract: RunnerContract) -> RunnerContract:
    """The contract with an openai-batch input's file and S3 outputs (and errors) in format
    openai-batch when they name no format: a batch file's answers are a batch output file."""
    if input_format(contract.input) != OPENAI_BATCH:
        return contract
    update: dict[str, StorageSpec] = {}
    for role in ("output", "errors"):
        spec: StorageSpec | None = getattr(contract, role)
        body = None if spec is None else spec.body()
        if spec is not None and isinstance(body, FileStorage | S3Storage) and body.format is None:
            settings = body.model_copy(update={"format": OPENAI_BATCH})
            update[role] = spec.model_copy(update={spec.kind: settings})
    return contract.model_copy(update=update) if update else contract


def _validation_line(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"contract {where}: {message}{more}" if where else f"contract: {message}{more}"


def _check_directions(contract: RunnerContract) -> None:
    specs: list[tuple[str, StorageSpec | None, Callable[[StorageSpec], StorageSpec]]] = [
        ("input", contract.input, check_input),
        ("output", contract.output, check_output),
        ("errors", contract.errors, check_output),
    ]
    for where, spec, check in specs:
        if spec is None:
            continue
        try:
            check(spec)
        except ValueError as exc:
            raise ConfigError(f"contract {where}.{exc}") from None


def check_plugins(contract: RunnerContract) -> None:
    """Resolve (import) every backend and protocol the contract names."""
    for where, spec in _storage_specs(contract):
        _registered(where, functools.partial(registry.storage_backend, spec.kind))
    _registered(
        "model.protocol", functools.partial(registry.model_protocol, contract.model.protocol)
    )


def _registered(where: str, load: Callable[[], T]) -> T:
    try:
        return load()
    except ConfigError as exc:
        raise ConfigError(f"contract {where}: {exc}") from None


def _storage_specs(contract: RunnerContract) -> list[tuple[str, StorageSpec]]:
    specs = [("input", contract.input), ("output", contract.output)]
    if contract.errors is not None:
        specs.append(("errors", contract.errors))
    return specs


def run_context(contract: RunnerContract, *, stop: threading.Event | None = None) -> RunContext:
    """This execution's identity: the run UID, the Job name (JOB_NAME wins) and, for a run
    shared by several pods, this pod's index ($JOB_COMPLETION_INDEX; ConfigError if wrong)."""
    shard = Shard.from_contract(contract.partitioning, os.environ)
    return RunContext(
        run_uid=contract.run.uid,
        job_name=os.environ.get("JOB_NAME") or contract.job_name,
        parameters=dict(contract.parameters),
        secrets_dir=contract.secrets_dir,
        scheduled=contract.run.scheduled,
        id_field=_input_id_field(contract.input),
        tuning=contract.runner,
        stop=stop,
        denied_cidrs=tuple(contract.network.denied_cidrs) if contract.network else (),
        input_format=input_format(contract.input),
        shard_index=shard.index,
        shard_count=shard.count,
        shard_rule=shard.rule,
    )


def _input_id_field(storage: StorageSpec) -> str | None:
    if input_format(storage) == OPENAI_BATCH:
        return BATCH_ID_FIELD  # the custom_id: unique in a batch file, as OpenAI requires
    body = storage.body()
    value = body.get("idField") if isinstance(body, dict) else getattr(body, "id_field", None)
    return value if isinstance(value, str) else None


def open_all(
    contract: RunnerContract, stack: ExitStack, *, stop: threading.Event | None = None
) -> Opened:
    """Open source, sinks and model client; each is closed when `stack` closes."""
    ctx = run_context(contract, stop=stop)
    source = _open("input", contract.input, lambda b, s: b.open_source(s, ctx))
    stack.callback(source.close)
    ctx = replace(ctx, first_record=first_record(source, contract.runner, stop=stop))
    sink = _open("output", contract.output, lambda b, s: b.open_sink(s, ctx, role="output"))
    stack.callback(sink.close)
    error_sink = _open_errors(contract, ctx)
    stack.callback(error_sink.close)
    protocol = contract.model.protocol
    factory = _registered("model.protocol", functools.partial(registry.model_protocol, protocol))
    client: ModelClient = _configured("model", lambda: factory(contract.model, ctx))
    stack.callback(client.close)
    return Opened(ctx, source, sink, error_sink, client)


def first_record(
    source: Source, tuning: RunnerTuning, *, stop: threading.Event | None
) -> Callable[[], Record | None]:
    """A function giving the input's first readable record's data (None for an empty input),
    read once, when first asked (`RunContext.first_record`), retried as input reads are."""

    def read() -> Record | None:
        records = source.records(0)
        try:
            for record in records:
                if not isinstance(record, UnreadableRecord):
                    return record.data
        finally:
            records.close()
        return None

    @functools.cache
    def first() -> Record | None:
        backoff = Backoff.from_tuning(tuning)
        return call_with_retry(read, backoff=backoff, stop=stop or threading.Event())

    return first


def _open(where: str, spec: StorageSpec, opener: Callable[[StorageBackend, Any], T]) -> T:
    backend = _registered(where, functools.partial(registry.storage_backend, spec.kind))()
    return _configured(f"{where}.{spec.kind}", lambda: opener(backend, spec.body()))


def _open_errors(contract: RunnerContract, ctx: RunContext) -> Sink:
    if contract.errors is not None:
        return _open("errors", contract.errors, lambda b, s: b.open_sink(s, ctx, role="errors"))

    def sibling(backend: StorageBackend, settings: Any) -> Sink:
        # Default error output: next to the output, as the backend defines "next to".
        return backend.open_sink(backend.error_settings(settings), ctx, role="errors")

    return _open("output", contract.output, sibling)


def _configured(where: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(f"contract {where}{'.' if _names_field(text) else ': '}{text}") from None


def _names_field(text: str) -> bool:
    head, sep, _ = text.partition(": ")
    return bool(sep) and head.replace(".", "").replace("_", "").isalnum()
