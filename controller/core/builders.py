"""Pure builders: a resolved run (run + config + settings) in, manifest dicts out.

No I/O and no clock, so the reconciler, the tests and local execution
(`longrun run`) all render exactly the same contract and pod template. This module
builds the contract, its ConfigMap and the Job or CronJob around the pod; the pod
template is controller/core/runnerpod.py's, what every child shares
controller/core/children.py's. Both are re-exported here, so callers import one module.

The Job's podFailurePolicy (`pod_failure_policy`) decides which runner exits count
against `backoffLimit` (or, for a run spread over several pods, against each index's
`backoffLimitPerIndex`: `retry_fields`).
"""

from __future__ import annotations

import json

from contracts.config import InferenceConfigSpec
from contracts.contract import (
    DEFAULT_SECRETS_DIR,
    EXIT_BAD_CONTRACT,
    ConfigIdentity,
    Partitioning,
    RunIdentity,
    RunnerContract,
    RunnerNetwork,
)
from contracts.model import kserve_view
from controller.core import names
from controller.core.children import (
    Manifest,
    ObjectIdentity,
    Resolved,
    child_metadata,
    image_of,
    labels_of,
    owner_reference,
    service_account_of,
)
from controller.core.jobs import EXIT_SIGTERM
from controller.core.kueue import policy as queueing
from controller.core.runnerpod import (
    JOB_NAME_LABEL,
    RUNNER_UID,
    build_container,
    build_pod_template,
    restricted_container_security,
    restricted_pod_security,
    runner_env,
    volumes_and_mounts,
)
from controller.core.settings import Settings

# Re-exported: callers build every child of a run from this module.
__all__ = [
    "JOB_NAME_LABEL",
    "RUNNER_UID",
    "Manifest",
    "ObjectIdentity",
    "Resolved",
    "build_config_map",
    "build_container",
    "build_contract",
    "build_cron_job",
    "build_job",
    "build_job_spec",
    "build_pod_template",
    "child_metadata",
    "image_of",
    "labels_of",
    "owner_reference",
    "pod_failure_policy",
    "restricted_container_security",
    "restricted_pod_security",
    "retry_fields",
    "runner_env",
    "service_account_of",
    "spec_hash",
    "volumes_and_mounts",
]


def build_contract(resolved: Resolved, settings: Settings | None = None) -> RunnerContract:
    """The runner contract of a run: no secret values, only references.

    `settings` adds the controller's network rules (DENIED_CIDRS); without any the contract
    has no `network` block, so it reads exactly as before they existed.
    """
    cfg, spec = resolved.config_spec, resolved.spec
    denied = settings.denied_cidrs if settings is not None else ()
    model = cfg.endpoint()
    return RunnerContract(
        job_id=resolved.run.uid,
        job_name=resolved.child_name,
        run=RunIdentity(
            name=resolved.run.name,
            namespace=resolved.run.namespace,
            uid=resolved.run.uid,
            generation=resolved.run.generation,
            scheduled=spec.is_scheduled,
        ),
        config=ConfigIdentity(
            name=resolved.config.name,
            namespace=resolved.config.namespace,
            generation=resolved.config.generation,
        ),
        model=model,
        kserve=kserve_view(model),
        input=cfg.storage.input,
        output=cfg.storage.output,
        errors=cfg.storage.errors,
        parameters=dict(spec.parameters),
        runner=cfg.runner,
        timeout_seconds=spec.timeout_seconds,
        secrets_dir=DEFAULT_SECRETS_DIR,
        network=RunnerNetwork(denied_cidrs=list(denied)) if denied else None,
        partitioning=(
            Partitioning.of_run(spec.parallelism, cfg.storage.input)
            if spec.parallelism > 1
            else None
        ),
    )


def build_config_map(resolved: Resolved, settings: Settings | None = None) -> Manifest:
    """The ConfigMap holding the contract, owned by the run."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(resolved, names.config_map_name(resolved.run.name)),
        "data": {names.CONTRACT_KEY: build_contract(resolved, settings).to_json()},
    }


def pod_failure_policy() -> Manifest:
    """Fail the Job at once on a bad contract (exit 2); a stopped runner and disruptions
    do not count against `backoffLimit`.

    Rules apply in order, first match wins. Exit 143 is the runner stopped by SIGTERM: the
    pod was deleted (the run suspended, `kubectl delete pod`, a node shutting down), and
    nothing about the run failed; its committed chunks stay and the next pod resumes after
    them. The runner exits 143 for no other reason (runners/cli.py: only its SIGTERM handler
    stops the pipeline), so this cannot turn a real failure into endless retries; a custom
    runner must keep that rule (docs/contract.md). Evictions and preemptions are ignored too
    (`DisruptionTarget`), whatever the exit code.
    """
    return {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": names.CONTAINER_NAME,
                    "operator": "In",
                    "values": [EXIT_BAD_CONTRACT],
                },
            },
            {
                "action": "Ignore",
                "onExitCodes": {
                    "containerName": names.CONTAINER_NAME,
                    "operator": "In",
                    "values": [EXIT_SIGTERM],
                },
            },
            {
                "action": "Ignore",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            },
        ]
    }


def build_job_spec(resolved: Resolved, settings: Settings) -> Manifest:
    """The Job spec of one execution (one-shot Job or a CronJob's jobTemplate)."""
    spec: Manifest = {
        **retry_fields(resolved.spec.parallelism, resolved.config_spec.backoff_limit),
        "podFailurePolicy": pod_failure_policy(),
        "template": build_pod_template(resolved, settings),
    }
    if resolved.spec.timeout_seconds is not None:
        spec["activeDeadlineSeconds"] = resolved.spec.timeout_seconds
    return spec


def retry_fields(parallelism: int, backoff_limit: int) -> Manifest:
    """How many pods an execution runs and how often each is retried.

    One pod: `backoffLimit`. Several (spec.parallelism): an Indexed Job whose `parallelism`
    pods run at once, one per index; the config's backoffLimit applies to each index
    (`backoffLimitPerIndex`), and `maxFailedIndexes: 0` fails the Job as soon as one index has
    spent its retries, since a run with a part missing has failed. `backoffLimit` stays unset:
    the API server then defaults it to 2147483647, so only the per-index limit counts. The
    podFailurePolicy's FailJob (exit 2) still fails the whole Job at once: every index reads
    the same contract.
    """
    if parallelism == 1:
        return {"backoffLimit": backoff_limit}
    return {
        "completionMode": "Indexed",
        "completions": parallelism,
        "parallelism": parallelism,
        "backoffLimitPerIndex": backoff_limit,
        "maxFailedIndexes": 0,
    }


def auto_delete_annotations(spec: InferenceConfigSpec) -> dict[str, str]:
    """The config's autoDeletePolicy frozen onto a one-shot Job at creation.

    A config change never touches a finished or running one-shot run, so the
    policy in force is the one the run started with.
    """
    return {
        names.POLICY_ANNOTATION: spec.auto_delete_policy,
        names.DELAY_ANNOTATION: str(spec.auto_delete_delay_seconds),
    }


def build_job(resolved: Resolved, settings: Settings) -> Manifest:
    """The Job of a one-shot run, owned by the run; in a Kueue queue, created suspended (Kueue
    starts it on admission, controller/core/kueue/policy.py)."""
    metadata = child_metadata(resolved, names.job_name(resolved.run.name))
    metadata["annotations"].update(auto_delete_annotations(resolved.config_spec))
    metadata["labels"].update(queueing.job_labels(resolved.spec, settings))
    spec = build_job_spec(resolved, settings)
    stop = resolved.spec.suspend or resolved.spec.cancel  # created paused, or not
    spec["suspend"] = stop or queueing.is_queued(resolved.spec, settings)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}


def build_cron_job_spec(resolved: Resolved, settings: Settings) -> Manifest:
    """The CronJob spec of a scheduled run (every field here is ours and kept in sync)."""
    run = resolved.spec
    assert run.schedule is not None  # callers build CronJobs for scheduled runs only
    job_metadata = {
        "labels": {**labels_of(resolved.run), **queueing.job_labels(run, settings)},
        "annotations": {names.RUN_ANNOTATION: resolved.run.name},
    }
    job_spec = build_job_spec(resolved, settings)
    if queueing.is_queued(run, settings):
        job_spec["suspend"] = True  # each execution waits for Kueue
    spec: Manifest = {
        "schedule": run.schedule,
        "concurrencyPolicy": run.concurrency_policy,
        "suspend": run.suspend,
        "successfulJobsHistoryLimit": run.successful_jobs_history_limit,
        "failedJobsHistoryLimit": run.failed_jobs_history_limit,
        "jobTemplate": {"metadata": job_metadata, "spec": job_spec},
    }
    if run.time_zone is not None:
        spec["timeZone"] = run.time_zone
    if run.starting_deadline_seconds is not None:
        spec["startingDeadlineSeconds"] = run.starting_deadline_seconds
    return spec


def spec_hash(spec: Manifest) -> str:
    """A stable digest of a desired spec; stored as an annotation to detect drift.

    Comparing against the stored spec would always differ: the API server adds
    defaults we do not set. The annotation records what we last asked for.
    """
    return names.short_hash(json.dumps(spec, sort_keys=True, separators=(",", ":")), 16)


def build_cron_job(resolved: Resolved, settings: Settings) -> Manifest:
    """The CronJob of a scheduled run, owned by the run."""
    spec = build_cron_job_spec(resolved, settings)
    metadata = child_metadata(resolved, names.cron_job_name(resolved.run.name))
    metadata["annotations"][names.SPEC_HASH_ANNOTATION] = spec_hash(spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": metadata,
        "spec": spec,
    }
