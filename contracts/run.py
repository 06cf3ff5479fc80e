"""InferenceRun: the "when" and "what" of an execution, and the status the controller reports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator
from pydantic.config import JsonDict

from contracts.base import DNS_SUBDOMAIN, Condition, NamespaceName, ObjectName, Schema, cel

# The runner's progress line, re-exported: runners and the controller import it from here.
from contracts.progress import COUNT_MAX as COUNT_MAX
from contracts.progress import PROGRESS_KEY as PROGRESS_KEY
from contracts.progress import ProgressReport as ProgressReport

Phase = Literal[
    "Pending", "Queued", "Running", "Succeeded", "Failed", "Cancelled", "Scheduled", "Suspended"
]
ExecutionPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]
HISTORY_LIMIT = 10
# The most pods one run may span (spec.parallelism; the contract's partitioning.count). Here and
# not in contracts/contract.py, which imports this module; it re-exports it.
PARALLELISM_MAX = 256
# The fields of a one-shot run's spec that may change after creation: everything else is fixed
# by the CEL rule below (tests/contracts check that this list names every other field).
ONE_SHOT_MUTABLE = ("suspend", "cancel")
ONE_SHOT_FIXED_FIELDS = (
    "configRef", "timeoutSeconds", "parameters", "schedule", "timeZone", "concurrencyPolicy",
    "successfulJobsHistoryLimit", "failedJobsHistoryLimit", "startingDeadlineSeconds",
    "queueName", "priorityClassName", "workloadPriorityClassName", "parallelism",
)  # fmt: skip
ONE_SHOT_FIXED_MESSAGE = (
    "a one-shot InferenceRun's spec is immutable after creation except suspend and cancel; "
    "create a new InferenceRun"
)
CANCEL_FINAL_MESSAGE = "spec.cancel cannot be undone; create a new InferenceRun to run again"
CANCEL_ONE_SHOT_MESSAGE = "cancel applies to one-shot runs; suspend a scheduled run instead"
# Kueue's names travel as label values (`kueue.x-k8s.io/queue-name`, `.../priority-class`):
# object names of at most 63 characters.
KueueName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN)]
# Conditions are a map keyed by type, so patches merge them like Kubernetes' own.
LIST_MAP_BY_TYPE: JsonDict = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
}


class ConfigRef(Schema):
    """Which InferenceConfig a run uses."""

    name: ObjectName = Field(description="Name of the InferenceConfig.")
    namespace: NamespaceName | None = Field(
        default=None,
        description=(
            "Namespace of the InferenceConfig; default: the run's. Another namespace works only "
            "if that config lists the run's namespace in spec.allowedNamespaces."
        ),
    )
    generation: int | None = Field(
        default=None,
        ge=1,
        description=(
            "The config generation this run accepts. A config in another namespace is pinned at "
            "the generation the run first accepted; a later change reaches the run only when "
            "its owner sets this to the new generation (status.acceptedConfig shows which runs)."
        ),
    )


class AcceptedConfig(Schema):
    """The config version a run's children were rendered from."""

    uid: Annotated[str, StringConstraints(max_length=128)] = Field(description="The config's UID.")
    generation: int = Field(ge=0, description="The config's metadata.generation.")


def _unchanged(field: str) -> str:
    """CEL: `field` is as it was (both absent, or both present and equal)."""
    return (
        f"has(self.{field}) == has(oldSelf.{field}) && "
        f"(!has(self.{field}) || self.{field} == oldSelf.{field})"
    )


ONE_SHOT_FIXED_RULE = (
    "has(oldSelf.schedule) || ("
    + " && ".join(_unchanged(field) for field in ONE_SHOT_FIXED_FIELDS)
    + ")"
)
CANCEL_FINAL_RULE = "!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)"
CANCEL_ONE_SHOT_RULE = "!has(self.cancel) || !self.cancel || !has(self.schedule)"


class InferenceRunSpec(Schema):
    """One execution (or a schedule of executions) of an InferenceConfig."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.schedule) == has(oldSelf.schedule)",
            "spec.schedule cannot be added or removed after creation; create a new InferenceRun",
            ONE_SHOT_FIXED_RULE,
            ONE_SHOT_FIXED_MESSAGE,
            CANCEL_FINAL_RULE,
            CANCEL_FINAL_MESSAGE,
            CANCEL_ONE_SHOT_RULE,
            CANCEL_ONE_SHOT_MESSAGE,
            "!has(self.timeZone) || has(self.schedule)",
            "timeZone needs schedule",
        )
    )

    config_ref: ConfigRef = Field(description="The InferenceConfig to run.")
    timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=31_536_000,
        description="Deadline of one execution in seconds (the Job's activeDeadlineSeconds).",
    )
    parameters: dict[str, Annotated[str, StringConstraints(max_length=65536)]] = Field(
        default_factory=dict,
        max_length=256,
        description="Free-form string parameters passed as-is to the runner contract.",
    )
    schedule: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = Field(
        default=None,
        description=(
            "Cron schedule (5 fields or @hourly/@daily/...). When set the run executes on this "
            "schedule through a CronJob; when empty it executes once."
        ),
    )
    time_zone: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = Field(
        default=None,
        description="IANA time zone of the schedule, e.g. Europe/Rome; default: the controller's.",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default="Forbid",
        description="Scheduled runs: Allow, Forbid (skip while one runs) or Replace.",
    )
    suspend: bool = Field(
        default=False,
        description=(
            "Scheduled runs: pause future executions. One-shot runs: suspend the Job (its pods "
            "stop, committed chunks stay, phase Suspended); set back to false to resume after "
            "the committed chunks. Under Kueue through the Workload's spec.active."
        ),
    )
    cancel: bool = Field(
        default=False,
        description=(
            "One-shot runs: stop the run for good and keep what it committed; it ends in phase "
            "Cancelled with its counts. Cannot be undone."
        ),
    )
    successful_jobs_history_limit: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Scheduled runs: finished successful Jobs kept.",
    )
    failed_jobs_history_limit: int = Field(
        default=1,
        ge=0,
        le=100,
        description="Scheduled runs: finished failed Jobs kept.",
    )
    starting_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Scheduled runs: skip an execution that cannot start within this many seconds.",
    )

    queue_name: KueueName | None = Field(
        default=None,
        description=(
            "Kueue LocalQueue of the run's Jobs (the kueue.x-k8s.io/queue-name label); default: "
            "the controller's (chart: kueue.queueName). A Job in a queue is created suspended "
            "and Kueue decides when it runs (docs/shared-clusters.md)."
        ),
    )
    priority_class_name: ObjectName | None = Field(
        default=None,
        description=(
            "PriorityClass of the runner pods (pod spec.priorityClassName); only names the "
            "controller allows (chart: runner.allowedPriorityClasses). Kueue also reads the "
            "Job's priority from it unless workloadPriorityClassName is set."
        ),
    )
    workload_priority_class_name: KueueName | None = Field(
        default=None,
        description=(
            "Kueue WorkloadPriorityClass of the run's Jobs (the kueue.x-k8s.io/priority-class "
            "label): their priority in the queue, for admission and preemption, without "
            "changing the pods' priority; only names the controller allows (chart: "
            "kueue.allowedWorkloadPriorityClasses)."
        ),
    )

    parallelism: int = Field(
        default=1,
        ge=1,
        le=PARALLELISM_MAX,
        description=(
            "Pods that share the run's input, each its own part of it: more than 1 makes each "
            "execution an Indexed Job of this many pods, which run at once, and the status adds "
            'their counts up (docs/shared-clusters.md, "One run across many pods").'
        ),
    )

    @model_validator(mode="after")
    def _cancel_is_one_shot(self) -> InferenceRunSpec:
        if self.cancel and self.schedule is not None:
            raise ValueError(CANCEL_ONE_SHOT_MESSAGE)
        return self

    @property
    def is_scheduled(self) -> bool:
        """True when the run executes on a cron schedule."""
        return self.schedule is not None


class RunResult(Schema):
    """The runner's summary of one execution (its termination message)."""

    records_read: int = Field(default=0, ge=0, description="Input records read.")
    records_written: int = Field(default=0, ge=0, description="Predictions written.")
    records_failed: int = Field(default=0, ge=0, description="Records sent to the error output.")
    records_retried: int = Field(default=0, ge=0, description="Requests retried.")
    chunks: int = Field(default=0, ge=0, description="Chunks committed.")
    duration_seconds: float = Field(default=0, ge=0, description="Wall time of the execution.")
    output: Annotated[str, StringConstraints(max_length=2048)] | None = Field(
        default=None, description="Where predictions were written."
    )
    error_output: Annotated[str, StringConstraints(max_length=2048)] | None = Field(
        default=None, description="Where failed records were written."
    )
    reason: Annotated[str, StringConstraints(max_length=1024)] | None = Field(
        default=None, description="Why the execution failed, when it did."
    )
    run_completed: bool | None = Field(
        default=None,
        description=(
            "A run over several pods: whether this pod found every chunk of the run committed "
            "and marked the output complete (summed over the pods: whether one did). When "
            "every pod ended well and none did, the run failed with OutputIncomplete."
        ),
    )
    prompt_tokens: int | None = Field(
        default=None, ge=0, description="OpenAI protocols: prompt tokens of the written records."
    )
    completion_tokens: int | None = Field(
        default=None,
        ge=0,
        description="OpenAI protocols: completion tokens of the written records.",
    )
    total_tokens: int | None = Field(
        default=None,
        ge=0,
        description=(
            "OpenAI protocols: total tokens of the written records: the sum of `usage` over the "
            "output."
        ),
    )


ShortText = Annotated[str, StringConstraints(max_length=32)]


class RunProgress(Schema):
    """Live counts of the execution running now, from the runner's last progress line."""

    job_name: ObjectName | None = Field(default=None, description="The Job they come from.")
    records_read: int | None = Field(default=None, ge=0, description="Records read.")
    records_written: int | None = Field(default=None, ge=0, description="Predictions written.")
    records_failed: int | None = Field(default=None, ge=0, description="Records failed.")
    records_total: int | None = Field(
        default=None, ge=0, description="Input records, when the source knows how many."
    )
    percent: float | None = Field(
        default=None, ge=0, le=100, description="Records done (written or failed) of the total."
    )
    records_per_second: float | None = Field(
        default=None, ge=0, description="The runner's rate while it runs."
    )
    eta_seconds: int | None = Field(default=None, ge=0, description="Seconds left, estimated.")
    tokens_total: int | None = Field(
        default=None, ge=0, description="OpenAI protocols: total tokens of the records written."
    )
    tokens_per_second: float | None = Field(
        default=None, ge=0, description="OpenAI protocols: the runner's tokens per second."
    )
    updated_at: datetime | None = Field(
        default=None, description="When the controller last read the runner's progress."
    )
    text: ShortText | None = Field(
        default=None, description="Done so far, e.g. 1.2M/3M (41%) (the Progress column)."
    )
    rate_text: ShortText | None = Field(
        default=None, description="Rate, e.g. 1.2k/s (the Rate column)."
    )
    eta_text: ShortText | None = Field(
        default=None, description="Time left, e.g. 5m (the ETA column)."
    )
    tokens_per_second_text: ShortText | None = Field(
        default=None, description="Tokens per second, e.g. 1.2k/s (the Tokens/s column, wide)."
    )


class Execution(Schema):
    """One execution of a scheduled run."""

    job_name: ObjectName = Field(description="The Job of this execution.")
    phase: ExecutionPhase = Field(description="Pending, Running, Succeeded or Failed.")
    schedule_time: datetime | None = Field(default=None, description="When it was scheduled.")
    start_time: datetime | None = Field(default=None, description="When it started.")
    completion_time: datetime | None = Field(default=None, description="When it finished.")
    result: RunResult | None = Field(default=None, description="The runner's summary.")


class InferenceRunStatus(Schema):
    """What the controller observed about a run."""

    phase: Phase | None = Field(
        default=None,
        description=(
            "Pending, Queued (waiting for Kueue), Running, Suspended, Succeeded, Failed, "
            "Cancelled (one-shot); Scheduled, Suspended (scheduled)."
        ),
    )
    message: Annotated[str, StringConstraints(max_length=32768)] | None = Field(
        default=None, description="What is wrong, in plain words, when something is."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the status was computed from."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Accepted, Queued, Running, Complete, Failed with reasons.",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )
    accepted_config: AcceptedConfig | None = Field(
        default=None,
        description="The config version the run's children were rendered from (see configRef).",
    )
    model_deployment: Annotated[str, StringConstraints(max_length=317)] | None = Field(
        default=None,
        description="The ModelDeployment (ns/name) the run was admitted to; what scaling counts.",
    )
    config_map_name: ObjectName | None = Field(
        default=None, description="ConfigMap holding the rendered contract."
    )
    job_name: ObjectName | None = Field(default=None, description="Job of a one-shot run.")
    cron_job_name: ObjectName | None = Field(
        default=None, description="CronJob of a scheduled run."
    )
    workload_name: ObjectName | None = Field(
        default=None, description="Kueue's Workload of a one-shot run's Job, when Kueue queues it."
    )
    start_time: datetime | None = Field(
        default=None, description="When the latest execution started."
    )
    completion_time: datetime | None = Field(
        default=None, description="When the latest execution finished."
    )
    last_schedule_time: datetime | None = Field(
        default=None,
        description="Scheduled runs: when the latest execution was scheduled.",
    )
    next_schedule_time: datetime | None = Field(
        default=None, description="Scheduled runs: when the next execution is due."
    )
    result: RunResult | None = Field(
        default=None, description="Summary of the latest finished execution."
    )
    progress: RunProgress | None = Field(
        default=None,
        description=(
            "Live counts of the execution running now (refreshed every progress interval); "
            "a finished one-shot run keeps its final counts."
        ),
    )
    history: list[Execution] = Field(
        default_factory=list,
        max_length=HISTORY_LIMIT,
        description="Scheduled runs: the most recent executions, newest first.",
    )
