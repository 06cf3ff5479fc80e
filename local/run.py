"""`longrun run`: execute an InferenceRun on this machine, the embedded default.

A first try should not need a cluster, and what works here must work there, so
nothing is re-implemented: the files are validated like `longrun validate`, the
run is resolved like the controller resolves it, the contract and the Job come
from the controller's pure builders, the pod runs through the local executor
with the Job's retry rules, and the status printed at the end is the
controller's own status function applied to the local Job and pod.

Exit codes: 0 the run succeeded, 1 it failed, 2 invalid input (files, flags,
an unmapped image, a missing Secret, or the runner's own "bad contract" exit 2),
130 stopped by Ctrl-C (committed chunks stay; the same command resumes).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from croniter import croniter

from contracts.contract import DEFAULT_SECRETS_DIR
from contracts.run import InferenceRunStatus
from controller.core import names
from controller.core.builders import (
    JOB_NAME_LABEL,
    Resolved,
    build_config_map,
    build_contract,
    build_job_spec,
)
from controller.core.settings import Settings, SettingsError, settings_from_env
from controller.core.status import Observed, next_schedule, one_shot_status
from local.display import Console, status_lines
from local.executor import (
    ImageMap,
    MappingSource,
    PodExit,
    local_path,
    parse_image_map,
    run_pod,
)
from local.inputs import (
    InputError,
    Inputs,
    add_env_files,
    load_inputs,
    pick_run,
    resolve_run,
)
from local.job import SETUP_REASONS, JobOutcome, run_job, short_backoff

Obj = dict[str, Any]
EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_WORK_DIR = ".longrun"
JOB_FAILURE_MESSAGES = {
    "BackoffLimitExceeded": "Job has reached the specified backoff limit",
    "DeadlineExceeded": "Job was active longer than specified deadline",
    "PodFailurePolicy": "Container runner failed with exit code 2 matching FailJob rule",
}

EPILOG = """\
images: the built-in runner image (any tag) runs as `python -m runners` in this Python;
  map any other image to a local command with --image-map IMAGE=COMMAND (repeatable,
  e.g. --image-map ghcr.io/acme/runner:1.0='python my_runner.py').
secrets: Secret objects in the files, or --env-file NAME=PATH (Secret NAME from KEY=VALUE lines).
resume: state lives in --work-dir/runs/<namespace>/<run>/ and the run UID is derived from
  namespace/name, so after Ctrl-C the same command resumes after the committed chunks.
exit codes: 0 succeeded, 1 failed, 2 invalid input, 130 interrupted.
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `run` to the `longrun` subcommands (handler: `handle`)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="execute an InferenceRun locally, without a cluster",
        description="Execute an InferenceRun locally: same contract and pod as in a cluster.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_arguments(parser)
    parser.set_defaults(handler=handle)
    return parser


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "run", nargs="?", metavar="RUN", help="InferenceRun name (needed if the files hold several)"
    )
    add(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="PATH",
        help="a YAML file or a directory of them: InferenceConfig, InferenceRun, Secret",
    )
    add(
        "-n",
        "--namespace",
        default="default",
        help="namespace of objects without one (%(default)s)",
    )
    add(
        "--env-file",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="Secret NAME from a .env-style file of KEY=VALUE lines (repeatable)",
    )
    add(
        "--image-map",
        action="append",
        default=[],
        metavar="IMAGE=COMMAND",
        help="run IMAGE (exact, or any tag of it) as COMMAND (repeatable)",
    )
    add("--work-dir", default=DEFAULT_WORK_DIR, help="local state directory (%(default)s)")
    add(
        "--follow-schedule",
        action="store_true",
        help="scheduled runs: keep running occurrences at their times until Ctrl-C",
    )
    add(
        "--backoff-seconds",
        type=float,
        default=None,
        metavar="S",
        help="fixed pause between pod retries (default 1, 2, 4... up to 10 s)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`longrun run` as a standalone command (`python -m local.run`)."""
    parser = argparse.ArgumentParser(
        prog="longrun run", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _add_arguments(parser)
    return handle(parser.parse_args(argv))


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

    @property
    def pod_root(self) -> Path:
        """Where the pod's filesystem (mounts, termination message) is materialized."""
        return self.run_dir / "pod"


def handle(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the command; returns the exit code."""
    stream = out or sys.stderr
    try:
        local = prepare(args, console=Console(stream))
    except (InputError, SettingsError, ValueError) as exc:
        print(f"longrun run: {exc}", file=stream)
        return EXIT_INVALID
    with _sigint_stops(local.stop):
        if local.resolved.spec.is_scheduled:
            return run_scheduled(local, follow=args.follow_schedule)
        return finish(local, run_occurrence(local, job_name=local.resolved.child_name))


def prepare(args: argparse.Namespace, *, console: Console) -> LocalRun:
    """Load, validate and resolve; InputError (or SettingsError) when anything is wrong."""
    settings = settings_from_env(os.environ)
    inputs = load_inputs(args.files, namespace=args.namespace)
    add_env_files(inputs, args.env_file, namespace=args.namespace)
    run = pick_run(inputs, args.run, namespace=args.namespace)
    resolved = resolve_run(run, inputs, settings=settings)
    images = ImageMap(settings.default_runner_image, parse_image_map(args.image_map))
    run_dir = Path(args.work_dir).resolve() / "runs" / resolved.run.namespace / resolved.run.name
    local = LocalRun(resolved, settings, inputs, images, run_dir, console)
    if args.backoff_seconds is not None:
        local.backoff = fixed_backoff(float(args.backoff_seconds))
    return local


def fixed_backoff(seconds: float) -> Callable[[int], float]:
    """The same pause before every retry (--backoff-seconds)."""

    def backoff(_failures: int) -> float:
        return seconds

    return backoff


@contextmanager
def _sigint_stops(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `stop` (the pod then gets SIGTERM) instead of raising KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def local_source(local: LocalRun) -> MappingSource:
    """The run's ConfigMap and the namespace's Secrets, as the pod's volumes will see them."""
    resolved = local.resolved
    config_map = build_config_map(resolved)
    # The one deviation from the cluster: Secrets are materialized under the pod root, not at
    # /var/run/longrun/secrets, so the contract (rendered by the same builder) gets only its
    # secretsDir pointed there. Every other field is exactly what the controller renders.
    secrets_dir = str(local_path(local.pod_root, DEFAULT_SECRETS_DIR))
    contract = build_contract(resolved).model_copy(update={"secrets_dir": secrets_dir})
    config_map["data"][names.CONTRACT_KEY] = contract.to_json()
    namespace = resolved.run.namespace
    secrets = {n: dict(d) for (ns, n), d in local.inputs.secrets.items() if ns == namespace}
    return MappingSource({config_map["metadata"]["name"]: config_map["data"]}, secrets)


def pod_for(template: Obj, *, job_name: str, namespace: str, job_uid: str) -> Obj:
    """A pod of the Job as the Job controller would create it (name, uid, job labels)."""
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

    def attempt(index: int, deadline: float | None) -> PodExit:
        pod = pod_for(spec["template"], job_name=job_name, namespace=namespace, job_uid=job_uid)
        occurrence.pods.append(pod)
        if index:
            local.console.say(f"longrun: retrying: pod {pod['metadata']['name']}")
        with _pod_log(local.run_dir, pod, local.console) as on_line:
            exit_ = run_pod(
                pod,
                source=source,
                root=local.pod_root,
                images=local.images,
                on_line=on_line,
                cwd=Path.cwd(),
                deadline=deadline,
                stop=local.stop,
            )
        _record_exit(pod, exit_)
        return exit_

    occurrence.outcome = run_job(
        spec,
        attempt=attempt,
        container=names.CONTAINER_NAME,
        stop=local.stop,
        backoff=local.backoff,
    )
    occurrence.finished = _now_text()
    local.console.done()
    return occurrence


@contextmanager
def _pod_log(run_dir: Path, pod: Obj, console: Console) -> Iterator[Callable[[str, str], None]]:
    """Container output to `<run dir>/logs/<pod>.log` and to the console."""
    logs = run_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    with open(logs / f"{pod['metadata']['name']}.log", "a", encoding="utf-8") as handle:

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
        pods=occurrence.pods[-1:],  # the latest pod carries the summary the controller copies
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
    bad_input = outcome.reason in (*SETUP_REASONS, "PodFailurePolicy")
    return EXIT_INVALID if bad_input else EXIT_FAILED


def scheduled_job_name(local: LocalRun, when: datetime) -> str:
    """`<cronjob>-<minutes since epoch>`, as the CronJob controller names its Jobs."""
    return f"{names.cron_job_name(local.resolved.run.name)}-{int(when.timestamp()) // 60}"


def previous_fire(local: LocalRun, *, now: datetime) -> datetime:
    """The latest scheduled time not after `now` (names the occurrence run now)."""
    spec = local.resolved.spec
    zone = ZoneInfo(spec.time_zone or "UTC")
    at: datetime = croniter(spec.schedule, now.astimezone(zone)).get_prev(datetime)
    return at


def run_scheduled(local: LocalRun, *, follow: bool) -> int:
    """One occurrence now, or (follow) every occurrence at its time until Ctrl-C."""
    spec = local.resolved.spec
    now = datetime.now(UTC)
    upcoming = next_schedule(spec, after=now)
    if not follow:
        when = previous_fire(local, now=now)
        local.console.say(
            f"longrun: scheduled run ({spec.schedule}, {spec.time_zone or 'UTC'}): running one "
            f"occurrence now; next scheduled time {_text(upcoming)} "
            "(--follow-schedule keeps running them)"
        )
        occurrence = run_occurrence(local, job_name=scheduled_job_name(local, when))
        return finish(local, occurrence, next_time=upcoming)
    return follow_schedule(local, first=upcoming)


def follow_schedule(local: LocalRun, *, first: datetime | None) -> int:
    """Run occurrences at their scheduled times, one at a time, until Ctrl-C."""
    when, code = first, EXIT_OK
    while when is not None:
        local.console.say(f"longrun: next occurrence at {_text(when)} (Ctrl-C to stop)")
        if local.stop.wait(max((when - datetime.now(UTC)).total_seconds(), 0)):
            return EXIT_INTERRUPTED
        occurrence = run_occurrence(local, job_name=scheduled_job_name(local, when))
        after = max(when, datetime.now(UTC))
        upcoming = next_schedule(local.resolved.spec, after=after)
        code = finish(local, occurrence, next_time=upcoming)
        if code in (EXIT_INTERRUPTED, EXIT_INVALID):
            return code
        when = upcoming
    return code


def _text(moment: datetime | None) -> str:
    return moment.isoformat() if moment else "none"


def _now_text() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def summary(status: InferenceRunStatus) -> str:
    """The status as JSON (for scripts and tests)."""
    return json.dumps(status.to_wire(), sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
