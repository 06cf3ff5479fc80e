"""InferenceRun: the "when" and "what" of an execution, and the status the controller reports."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints
from pydantic.config import JsonDict

from contracts.base import Condition, NamespaceName, ObjectName, Schema, cel

Phase = Literal["Pending", "Running", "Succeeded", "Failed", "Scheduled", "Suspended"]
ExecutionPhase = Literal["Pending", "Running", "Succeeded", "Failed"]
ConcurrencyPolicy = Literal["Allow", "Forbid", "Replace"]
HISTORY_LIMIT = 10
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


class InferenceRunSpec(Schema):
    """One execution (or a schedule of executions) of an InferenceConfig."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.schedule) == has(oldSelf.schedule)",
            "spec.schedule cannot be added or removed after creation; create a new InferenceRun",
            "has(oldSelf.schedule) || self == oldSelf",
            "a one-shot InferenceRun's spec is immutable after creation; create a new InferenceRun",
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
    suspend: bool = Field(default=False, description="Scheduled runs: pause future executions.")
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
        description="Pending, Running, Succeeded, Failed (one-shot); Scheduled, Suspended.",
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
        description="Accepted, Running, Complete, Failed with reasons.",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )
    accepted_config: AcceptedConfig | None = Field(
        default=None,
        description="The config version the run's children were rendered from (see configRef).",
    )
    config_map_name: ObjectName | None = Field(
        default=None, description="ConfigMap holding the rendered contract."
    )
    job_name: ObjectName | None = Field(default=None, description="Job of a one-shot run.")
    cron_job_name: ObjectName | None = Field(
        default=None, description="CronJob of a scheduled run."
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
    history: list[Execution] = Field(
        default_factory=list,
        max_length=HISTORY_LIMIT,
        description="Scheduled runs: the most recent executions, newest first.",
    )
