"""The runner contract v1: the JSON document a runner reads to know what to do.

It is a superset of Krateo's contract (`jobId`, `jobName`, `kserve`, `input`,
`output`, `parameters` keep their meaning) so Krateo runner images work, plus
run identity, the normalized `model` block and runner tuning. It never holds a
secret value: Secret references stay references, and `secretsDir` says where
the controller mounted them (`<secretsDir>/<secret name>/<key>`).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from contracts.base import ObjectName, Schema
from contracts.config import RunnerTuning
from contracts.llm import run_problem
from contracts.model import KServeBlock, ModelEndpoint
from contracts.run import PARALLELISM_MAX as PARALLELISM_MAX  # re-exported: the runner's
from contracts.run import RunResult
from contracts.storage import StorageSpec
from contracts.storage_rules import sharing_problem

CONTRACT_SCHEMA_ID = "https://longrun.dev/schemas/contract-v1.json"
DEFAULT_CONTRACT_PATH = "/etc/longrun/contract.json"
KRATEO_CONTRACT_PATH = "/tmp/contract.json"
DEFAULT_SECRETS_DIR = "/var/run/longrun/secrets"
SUMMARY_MAX_BYTES = 4096

# Exit codes shared by longrun's runner and Krateo's runner images.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_CONTRACT = 2  # do not retry: the Job's podFailurePolicy fails fast on it
EXIT_INPUT = 3
EXIT_INFERENCE = 4
EXIT_OUTPUT = 5


class RunIdentity(Schema):
    """Which InferenceRun this contract belongs to."""

    name: ObjectName = Field(description="InferenceRun name.")
    namespace: ObjectName = Field(description="InferenceRun namespace.")
    uid: str = Field(description="InferenceRun UID; with the Job name it keys resumable output.")
    generation: int = Field(ge=0, description="InferenceRun generation the contract renders.")
    scheduled: bool = Field(description="True for a scheduled run (one contract, many Jobs).")


class ConfigIdentity(Schema):
    """Which InferenceConfig the contract was rendered from."""

    name: ObjectName = Field(description="InferenceConfig name.")
    namespace: ObjectName = Field(description="InferenceConfig namespace.")
    generation: int = Field(ge=0, description="InferenceConfig generation the contract renders.")


def checked_cidr(text: str) -> str:
    """`text` as a canonical CIDR (`169.254.0.0/16`; an address alone is a /32 or /128);
    else a ValueError saying what is wrong."""
    value = text.strip()
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        if "has host bits set" in str(exc):
            meant = ipaddress.ip_network(value, strict=False)
            raise ValueError(f"{text!r} has host bits set: did you mean {meant}?") from None
        raise ValueError(
            f"{text!r} is not a CIDR (examples: 169.254.0.0/16, fd00:ec2::254/128)"
        ) from None
    return str(network)


Cidr = Annotated[str, AfterValidator(checked_cidr)]


class RunnerNetwork(Schema):
    """Where the runner may not connect: the controller's settings, never a config's."""

    denied_cidrs: list[Cidr] = Field(
        default_factory=list,
        description=(
            "Networks the runner never connects to (controller setting DENIED_CIDRS), checked "
            "against every address a host name resolves to, for storage and model alike."
        ),
    )


# The env var the Job controller sets in each pod of an Indexed Job: the pod's index.
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
ROUND_ROBIN = "chunkRoundRobin"  # Partitioning.rule
CHUNK_RANGES = "chunkRanges"


class Partitioning(Schema):
    """How the pods of one run share its input (docs/shared-clusters.md, "The partitioning rule").

    The run's pods are the indexes 0..count-1 of an Indexed Job; each reads its index from
    `$JOB_COMPLETION_INDEX`. Chunk c is the input positions [c x chunkSize, (c+1) x chunkSize).
    Rule `chunkRoundRobin`: chunk c belongs to index c mod count; every index reads the input
    in order (seeking to its first uncommitted chunk) and passes over the other indexes'
    chunks without calling the model. Rule `chunkRanges` (Parquet input and SQL tables, which
    can be counted and entered at any record): with K = ceil(records / chunkSize) chunks,
    counted when the pod starts, index i owns chunks [i x K // count, (i+1) x K // count), the
    last index also everything past K; an index reads its range only, and the ids before it
    when ids come from a field. Either way each index commits its own chunks under their
    run-wide numbers, so the output is the one a single pod would write, and screens the ids
    before its chunks, so a duplicate id is refused exactly as in a one-pod run. The index that
    finds, after its own last chunk, every chunk of the input committed writes the output's
    completion marker and judges the error budget on the whole run; the others leave it to it.
    """

    count: int = Field(
        ge=2, le=PARALLELISM_MAX, description="The run's pods (Indexed Job completions)."
    )
    rule: Literal["chunkRoundRobin", "chunkRanges"] = Field(
        default="chunkRoundRobin",
        description=(
            "chunkRoundRobin: chunk c belongs to index c mod count. chunkRanges: index i owns "
            "chunks [i*K // count, (i+1)*K // count) of the input's K chunks (the last index "
            "also those past K)."
        ),
    )

    @classmethod
    def of_run(cls, count: int, storage_input: StorageSpec) -> Partitioning:
        """The controller's choice for a run over `count` pods: chunkRanges for the inputs
        that can be counted before reading and entered at any record (Parquet files and
        objects: their footers say their row counts, and they are read from any row group;
        an SQL table: COUNT(*), and OFFSET in its fixed order), chunkRoundRobin for the rest
        (JSONL and CSV, an SQL query, HTTP APIs, plug-ins)."""
        body = storage_input.body()
        named = str(getattr(body, "path", None) or getattr(body, "key", None) or "").lower()
        parquet = getattr(body, "format", None) == "parquet" or (
            getattr(body, "format", None) is None and named.endswith((".parquet", ".parq"))
        )
        ranged = (parquet and storage_input.kind in ("file", "s3")) or (
            storage_input.kind == "sql" and getattr(body, "table", None) is not None
        )
        return cls(count=count, rule="chunkRanges" if ranged else "chunkRoundRobin")


class RunnerContract(Schema):
    """What a runner must do: read `input`, call `model`, write `output`."""

    # Runners ignore unknown top-level keys: fields may be added within v1.
    model_config = ConfigDict(extra="ignore")

    contract_version: Literal["v1"] = Field(
        default="v1",
        description="Contract format version; runners refuse other versions.",
    )
    job_id: str = Field(description="Krateo: the run's id (the InferenceRun UID).")
    job_name: str = Field(
        description=(
            "Krateo: the Job's name (one-shot) or the CronJob's name (scheduled; each execution's "
            "Job name is in the JOB_NAME environment variable)."
        )
    )
    run: RunIdentity = Field(description="The InferenceRun.")
    config: ConfigIdentity = Field(description="The InferenceConfig.")
    model: ModelEndpoint = Field(description="The normalized model endpoint.")
    kserve: KServeBlock | None = Field(
        default=None, description="Krateo: the model block, for KServe protocols only."
    )
    input: StorageSpec = Field(description="Where to read records: {<kind>: {...}}.")
    output: StorageSpec = Field(description="Where to write predictions: {<kind>: {...}}.")
    errors: StorageSpec | None = Field(
        default=None,
        description="Where failed records go; default: next to the output.",
    )
    parameters: dict[str, str] = Field(
        default_factory=dict, description="The run's parameters, as-is."
    )
    runner: RunnerTuning = Field(
        default_factory=RunnerTuning, description="Batching, retries, error budget."
    )
    timeout_seconds: int | None = Field(
        default=None, description="The run's deadline in seconds, if any."
    )
    secrets_dir: str = Field(
        default=DEFAULT_SECRETS_DIR,
        description="Referenced Secrets are mounted at <secretsDir>/<secret name>/<key>.",
    )
    network: RunnerNetwork | None = Field(
        default=None,
        description="The controller's network rules for the runner; absent when it sets none.",
    )
    partitioning: Partitioning | None = Field(
        default=None,
        description=(
            "The run is shared by several pods (an Indexed Job; the index is "
            "$JOB_COMPLETION_INDEX); absent for a one-pod run."
        ),
    )

    @model_validator(mode="after")
    def _llm_rules(self) -> RunnerContract:
        outputs = {"output": self.output, "errors": self.errors}
        problem = run_problem(
            self.model,
            self.model.protocol,
            storage_input=self.input,
            outputs=outputs,
            runner=self.runner,
            storage="",
        )
        if problem is None and self.partitioning is not None:
            problem = sharing_problem(self.output, self.errors, pods=self.partitioning.count)
        if problem is not None:
            raise ValueError(problem)
        return self

    def to_json(self) -> str:
        """Deterministic JSON: sorted keys, unset fields left out, trailing newline."""
        return json.dumps(self.to_wire(), sort_keys=True, indent=2) + "\n"


def contract_json_schema() -> dict[str, Any]:
    """The contract's JSON Schema (draft 2020-12), for runner authors in any language."""
    schema = RunnerContract.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": CONTRACT_SCHEMA_ID,
        **schema,
    }


def summary_json(result: RunResult) -> str:
    """A runner summary as the termination message: compact, at most 4 KiB."""
    text = json.dumps(result.to_wire(), sort_keys=True, separators=(",", ":"))
    while len(text.encode()) > SUMMARY_MAX_BYTES:
        # Halve the longest text until it fits; the counts always stay exact.
        texts = {"reason": result.reason, "output": result.output}
        texts["error_output"] = result.error_output
        name = max(texts, key=lambda key: len(texts[key] or ""))
        value = texts[name] or ""
        if len(value) <= 1:
            break
        result = result.model_copy(update={name: value[: len(value) // 2] + "…"})
        text = json.dumps(result.to_wire(), sort_keys=True, separators=(",", ":"))
    return text
