"""One occurrence of a run: a local Job, its pods, and the status the controller reads from them.

An occurrence is what one Job is in the cluster: a one-shot run has one, a
scheduled run one per scheduled time (`local.schedule`). Its pods come from the
Job spec the controller's builder renders, named and labelled as the Job
controller would (`pod_for`), and run through the local executor with the Job's
retry rules (`local.job`). The result is then read back as the controller reads
a cluster: a Job object and its latest pod, given to the controller's own
`one_shot_status` (`run_status`). `finish` prints that status and turns the
Job's end into the command's exit code.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from contracts.contract import COMPLETION_INDEX_ENV, DEFAULT_SECRETS_DIR
from contracts.run import InferenceRunStatus
from controller.core import names
from controller.core.builders import (
    JOB_NAME_LABEL,
    Resolved,
    build_config_map,
    build_contract,
    build_job_spec,
)
from controller.core.settings import Settings
from controller.core.status import Observed, one_shot_status
from local.display import Console, status_lines
from local.executor import PodExit, run_pod
from local.inputs import Inputs
from local.job import SETUP_REASONS, JobOutcome, run_indexes, run_job, short_backoff
from local.podspec import ImageMap, MappingSource, local_path

Obj = dict[str, Any]
# The exit codes of `longrun run` (see local.run).
EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130
# A local pod shares this host's network: its metrics endpoint (runners/metrics.py) listens
# on loopback, not on every interface as in a pod.
LOCAL_METRICS = {"LONGRUN_METRICS_ADDRESS": "127.0.0.1"}
# The completion index of an Indexed Job's pod (annotation and label, as the Job controller).
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_FAILURE_MESSAGES = {
    "BackoffLimitExceeded": "Job has reached the specified backoff limit",
    "DeadlineExceeded": "Job was active longer than specified deadline",
    "PodFailurePolicy": "Container runner failed with exit code 2 matching FailJob rule",
    "MaxFailedIndexesExceeded": "Job has exceeded the specified maximal number of failed indexes",
}


@dataclass
class LocalRun:
    """Everything one `longrun run` invocation needs."""

    resolved: Resolved
    settings: Settings
    inputs: Inputs
    images: ImageMap
    run_dir: Path
    console: Console
    stop: threading.Event = field(default_factory=threading.Event)
    backoff: Callable[[int], float] = short_backoff
    cleanups: list[Callable[[], None]] = field(default_factory=list)  # when the run is over
    output: str | None = None  # -o json|yaml: the final status on stdout
    printed: int = 0  # statuses printed on stdout so far (--follow-schedule prints several)

    @property
    def pod_root(self) -> Path:
        """Where the pod's filesystem (mounts, termination message) is materialized."""
        return self.run_dir / "pod"


def local_source(local: LocalRun) -> MappingSource:
    """The run's ConfigMap and the namespace's Secrets, as the pod's volumes will see them."""
    resolved = local.resolved
    config_map = build_config_map(resolved, local.settings)
    # The one deviation from the cluster: Secrets are materialized under the pod root, not at
    # /var/run/longrun/secrets, so the contract (rendered by the same builder) gets only its
    # secretsDir pointed there. Every other field is exactly what the controller renders.
    secrets_dir = str(local_path(local.pod_root, DEFAULT_SECRETS_DIR))
    contract = build_contract(resolved, local.settings).model_copy(
        update={"secrets_dir": secrets_dir}
    )
    config_map["data"][names.CONTRACT_KEY] = contract.to_json()
    namespace = resolved.run.namespace
    secrets = {n: dict(d) for (ns, n), d in local.inputs.secrets.items() if ns == namespace}
    return MappingSource({config_map["metadata"]["name"]: config_map["data"]}, secrets)


def pod_for(
    template: Obj, *, job_name: str, namespace: str, job_uid: str, index: int | None = None
) -> Obj:
    """A pod of the Job as the Job controller would create it (name, uid, job labels; an
    Indexed Job's pod its completion index, as annotation, label and JOB_COMPLETION_INDEX)."""
    pod = copy.deepcopy(template)
    meta = pod["metadata"]
    meta["name"] = f"{job_name}-{uuid.uuid4().hex[:5]}"
    meta["namespace"] = namespace
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = _now_text()
    meta["labels"].update(
        {
            "job-name": job_name,
            JOB_NAME_LABEL: job_name,
            "controller-uid": job_uid,
            "batch.kubernetes.io/controller-uid": job_uid,
        }
    )
    if index is not None:
        meta["labels"][COMPLETION_INDEX_KEY] = str(index)
        meta.setdefault("annotations", {})[COMPLETION_INDEX_KEY] = str(index)
        for container in pod["spec"]["containers"]:
            env = container.setdefault("env", [])
            env.append({"name": COMPLETION_INDEX_ENV, "value": str(index)})
    return pod


@dataclass
class Occurrence:
    """One local Job: its name, spec, pods and outcome."""

    job_name: str
    spec: Obj
    started: str
    pods: list[Obj] = field(default_factory=list)
    outcome: JobOutcome | None = None
    finished: str = ""


def run_occurrence(local: LocalRun, *, job_name: str) -> Occurrence:
    """Run one Job of the run to its end (or until Ctrl-C)."""
    spec = build_job_spec(local.resolved, local.settings)
    occurrence = Occurrence(job_name, spec, _now_text())
    source = local_source(local)
    job_uid = str(uuid.uuid4())
    namespace = local.resolved.run.namespace
    local.console.say(f"longrun: running {namespace}/{local.resolved.run.name} as Job {job_name}")

    def attempt(index: int, deadline: float | None, shard: int | None = None) -> PodExit:
        pod = pod_for(spec["template"], job_name=job_name, namespace=namespace, job_uid=job_uid,
                      index=shard)  # fmt: skip
        occurrence.pods.append(pod)
        if index:
            local.console.say(f"longrun: retrying: pod {pod['metadata']['name']}")
        elif shard is not None:
            local.console.say(f"longrun: pod {pod['metadata']['name']}: index {shard}")
        local.console.waiting()
        with _pod_log(local.run_dir, pod, local.console) as on_line:
            exit_ = run_pod(
                pod,
                source=source,
                root=local.pod_root,
                images=local.images,
                on_line=on_line,
                cwd=Path.cwd(),
                base_env={**os.environ, **LOCAL_METRICS},  # the environment of now
                deadline=deadline,
                stop=local.stop,
            )
        _record_exit(pod, exit_)
        return exit_

    container, stop, backoff = names.CONTAINER_NAME, local.stop, local.backoff
    if indexed(spec):  # a run over several pods, one after another
        occurrence.outcome = run_indexes(
            spec,
            attempt=lambda shard, n, deadline: attempt(n, deadline, shard),
            container=container,
            stop=stop,
            backoff=backoff,
        )
    else:
        occurrence.outcome = run_job(
            spec, attempt=attempt, container=container, stop=stop, backoff=backoff
        )
    occurrence.finished = _now_text()
    local.console.done()
    return occurrence


def indexed(spec: Obj) -> bool:
    """The Job runs one run over several pods (an Indexed Job)."""
    return spec.get("completionMode") == "Indexed"


@contextmanager
def _pod_log(run_dir: Path, pod: Obj, console: Console) -> Iterator[Callable[[str, str], None]]:
    """Container output to `<run dir>/logs/<pod>.log` and to the console."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    log = logs / f"{pod['metadata']['name']}.log"
    # Line-buffered: the log is read while the pod runs (its progress lines, `tail -f`).
    with open(log, "a", encoding="utf-8", buffering=1) as handle:

        def on_line(stream: str, line: str) -> None:
            with lock:
                handle.write(line + "\n")
            console.on_line(stream, line)

        yield on_line


def _record_exit(pod: Obj, exit_: PodExit) -> None:
    terminated = {"exitCode": exit_.exit_code, "reason": exit_.reason, "message": exit_.message}
    state = {"name": names.CONTAINER_NAME, "state": {"terminated": terminated}}
    pod["status"] = {
        "phase": "Succeeded" if exit_.exit_code == 0 else "Failed",
        "containerStatuses": [state],
    }


def job_object(occurrence: Occurrence, *, namespace: str) -> Obj:
    """The Job as the cluster would show it after this occurrence."""
    outcome = occurrence.outcome
    status: Obj = {"startTime": occurrence.started}
    if outcome is not None and outcome.phase != "Stopped":
        kind = "Complete" if outcome.phase == "Succeeded" else "Failed"
        message = outcome.last.message if outcome.reason in SETUP_REASONS and outcome.last else ""
        status["conditions"] = [
            {
                "type": kind,
                "status": "True",
                "reason": outcome.reason,
                "message": message or JOB_FAILURE_MESSAGES.get(outcome.reason, ""),
                "lastTransitionTime": occurrence.finished,
            }
        ]
        if kind == "Complete":
            status["completionTime"] = occurrence.finished
    else:
        status["active"] = 1  # interrupted: unfinished, and the next invocation resumes it
    return {"metadata": {"name": occurrence.job_name, "namespace": namespace}, "status": status}


def run_status(local: LocalRun, occurrence: Occurrence) -> InferenceRunStatus:
    """The InferenceRun status the controller would compute from this Job and its pods."""
    resolved = local.resolved
    run = local.inputs.runs[(resolved.run.namespace, resolved.run.name)]
    observed = Observed(
        run=run,
        spec=resolved.spec,
        previous=InferenceRunStatus(),
        config_map={"metadata": {"name": names.config_map_name(resolved.run.name)}},
        job=job_object(occurrence, namespace=resolved.run.namespace),
        # The latest pod carries the summary the controller copies; each index's, for several.
        pods=occurrence.pods if indexed(occurrence.spec) else occurrence.pods[-1:],
    )
    return one_shot_status(observed, problem=None, now=datetime.now(UTC))


def finish(local: LocalRun, occurrence: Occurrence, *, next_time: datetime | None = None) -> int:
    """Print the final status; the exit code for this occurrence."""
    status = run_status(local, occurrence)
    if next_time is not None:
        status = status.model_copy(update={"next_schedule_time": next_time})
    run = local.resolved.run
    for line in status_lines(status, name=run.name, namespace=run.namespace):
        local.console.say(line)
    if local.output:
        print_status(status, output=local.output, first=local.printed == 0)
        local.printed += 1
    outcome = occurrence.outcome
    assert outcome is not None
    if outcome.phase == "Stopped":
        local.console.say(
            "longrun: stopped; committed chunks are kept: run the same command "
            f"again to resume (state in {local.run_dir})"
        )
        return EXIT_INTERRUPTED
    if outcome.phase == "Succeeded":
        return EXIT_OK
    failed = next((c for c in status.conditions if c.type == "Failed"), None)
    budget = failed is not None and failed.reason == "ErrorBudgetExceeded"  # final, not bad input
    bad_input = outcome.reason in (*SETUP_REASONS, "PodFailurePolicy") and not budget
    return EXIT_INVALID if bad_input else EXIT_FAILED


def print_status(status: InferenceRunStatus, *, output: str, first: bool = True) -> None:
    """The status as the controller writes it (`status` of the InferenceRun), on stdout: JSON,
    or a YAML document (`---` before every one but the first)."""
    wire = status.to_wire()
    if output == "json":
        text = json.dumps(wire, indent=2) + "\n"
    else:
        text = ("" if first else "---\n") + yaml.safe_dump(wire, sort_keys=False)
    sys.stdout.write(text)
    sys.stdout.flush()


def _now_text() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
