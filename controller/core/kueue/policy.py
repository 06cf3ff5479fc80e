"""Which Jobs Kueue manages, the labels that put them in a queue, and who may name a priority.

Kueue reads two labels of a Job (its `jobframework`): `kueue.x-k8s.io/queue-name`, the
LocalQueue, and `kueue.x-k8s.io/priority-class`, a WorkloadPriorityClass. A Job is Kueue's
when it carries the queue label, or when Kueue's `manageJobsWithoutQueueName` is on (the
controller cannot read Kueue's configuration: the chart says so, KUEUE_MANAGE_JOBS_WITHOUT_
QUEUE_NAME). The label may also come from Kueue itself (its LocalQueue defaulting adds
`default` to Jobs without one), so a Job already made is judged by the labels it has.

Kueue owns `spec.suspend` of every Job it manages: it creates them suspended (its webhook
suspends one created running) and un-suspends them on admission, suspends them again on
preemption. longrun therefore creates them suspended and never writes that field again.

Priorities are a shared resource: a run with the highest priority preempts everyone else's.
So a run names only the PriorityClasses and WorkloadPriorityClasses the controller allows,
like the other pod knobs of controller/core/podpolicy.py; each refusal names the field and
the setting (and chart value) that allows it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping

from contracts.run import InferenceRunSpec
from controller.core.ports import Obj
from controller.core.settings import Settings
from controller.core.validation import Problem

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def queue_of(spec: InferenceRunSpec, settings: Settings) -> str | None:
    """The LocalQueue of a run's Jobs: its own, else the controller's default, else none."""
    return spec.queue_name or settings.default_queue_name


def job_labels(spec: InferenceRunSpec, settings: Settings) -> dict[str, str]:
    """The Kueue labels of a run's Job (or CronJob job template): queue and priority."""
    labels: dict[str, str] = {}
    if (queue := queue_of(spec, settings)) is not None:
        labels[QUEUE_LABEL] = queue
    if spec.workload_priority_class_name is not None:
        labels[PRIORITY_LABEL] = spec.workload_priority_class_name
    return labels


def is_queued(spec: InferenceRunSpec, settings: Settings) -> bool:
    """True when the run's Jobs will be Kueue's: created suspended, started by Kueue."""
    return queue_of(spec, settings) is not None or settings.kueue_manages_jobs_without_queue_name


def is_managed(job: Obj | None, settings: Settings) -> bool:
    """True when Kueue manages this Job (the queue label, or Kueue manages every Job)."""
    if job is None:
        return False
    labels: Mapping[str, str] = (job.get("metadata") or {}).get("labels") or {}
    return QUEUE_LABEL in labels or settings.kueue_manages_jobs_without_queue_name


def holds(spec: InferenceRunSpec, settings: Settings) -> bool:
    """A queued run suspended before its Job exists: the Job waits until it is resumed.

    Created suspended it would still enter the queue, and Kueue could admit it before its
    Workload is deactivated: holding the Job back keeps a suspended run out of the queue.
    """
    return spec.suspend and not spec.cancel and is_queued(spec, settings)


def priority_problems(spec: InferenceRunSpec, settings: Settings) -> Iterator[Problem]:
    """The run's priority names the controller does not allow (empty allow-list: none)."""
    checks = (
        (
            spec.priority_class_name,
            "spec.priorityClassName",
            "PriorityClass",
            "PriorityClassNotAllowed",
            settings.allowed_priority_classes,
            "ALLOWED_PRIORITY_CLASSES (chart: runner.allowedPriorityClasses)",
        ),
        (
            spec.workload_priority_class_name,
            "spec.workloadPriorityClassName",
            "WorkloadPriorityClass",
            "WorkloadPriorityClassNotAllowed",
            settings.allowed_workload_priority_classes,
            "ALLOWED_WORKLOAD_PRIORITY_CLASSES (chart: kueue.allowedWorkloadPriorityClasses)",
        ),
    )
    for name, field, what, reason, allowed, setting in checks:
        if name is None or any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed):
            continue
        listed = ", ".join(allowed) if allowed else "empty"
        yield Problem(
            field,
            reason,
            f'{what} "{name}" is not allowed: the controller allows names matching {setting}, '
            f"which is {listed}",
        )
