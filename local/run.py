"""`longrun run`: execute an InferenceRun on this machine, the embedded default.

A first try should not need a cluster, and what works here must work there, so
nothing is re-implemented: the files are validated like `longrun validate`, the
run is resolved like the controller resolves it, the contract and the Job come
from the controller's pure builders, the pod runs through the local executor
with the Job's retry rules, and the status printed at the end is the
controller's own status function applied to the local Job and pod.

`-o json|yaml` prints that final status on stdout (everything else is on stderr), for scripts.
Exit codes: 0 the run succeeded, 1 it failed, 2 invalid input (files, flags,
an unmapped image, a missing Secret, or the runner's own "bad contract" exit 2),
130 stopped by Ctrl-C (committed chunks stay; the same command resumes).

The command's own part is here: its flags, reading and resolving the inputs, and
Ctrl-C. A Job of the run is `local.occurrence`; the times of a scheduled run
are `local.schedule`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from controller.core.runnerpod import model_token
from controller.core.settings import SettingsError, settings_from_env
from local import generic
from local.display import Console
from local.inputs import (
    InputError,
    add_env_files,
    add_files_option,
    load_inputs,
    pick_run,
    resolve_run,
)
from local.occurrence import EXIT_FAILED, EXIT_INVALID, LocalRun, finish, run_occurrence
from local.overrides import HELP as SET_HELP
from local.overrides import apply_overrides
from local.podspec import ImageMap, parse_image_map
from local.runtimes import RuntimeUnavailable
from local.schedule import run_scheduled
from local.serve import DeploymentsForRun, ServeError, pairs

DEFAULT_WORK_DIR = ".longrun"
# A ServiceAccount token is the cluster's to issue (TokenRequest); this machine has none.
LOCAL_TOKEN = (
    "model.auth.serviceAccountToken: a local run has no cluster to issue a ServiceAccount "
    "token; for `longrun run` authenticate with a key Secret instead (model.auth.secretRef), "
    "e.g. --set 'icfg:spec.model.auth={secretRef: {name: model-key, key: api-key}}' "
    "--env-file model-key=key.env, or run it in a cluster"
)

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
    add_files_option(parser, holding="InferenceConfig, InferenceRun, Secret")
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
    add("--set", action="append", default=[], dest="overrides", metavar="OVERRIDE", help=SET_HELP)
    add("--work-dir", default=DEFAULT_WORK_DIR, help="local state directory (%(default)s)")
    add(
        "--follow-schedule",
        action="store_true",
        help="scheduled runs: keep running occurrences at their times until Ctrl-C",
    )
    add(
        "--pvc",
        action="append",
        default=[],
        metavar="CLAIM=DIR",
        help="a ModelDeployment started for the run: a directory standing in for a claim",
    )
    add(
        "--runtime-python",
        action="append",
        default=[],
        metavar="RUNTIME=PYTHON",
        help="a ModelDeployment started for the run: the Python with RUNTIME's server",
    )
    generic.add_flag(parser)
    add(
        "-o",
        "--output",
        choices=["json", "yaml"],
        default=None,
        help="print the run's final status (the InferenceRun's status) on stdout as json or "
        "yaml; everything else stays on stderr",
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


def handle(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run the command; returns the exit code."""
    stream = out or sys.stderr
    try:
        local = prepare(args, console=Console(stream))
    except (InputError, SettingsError, ValueError) as exc:
        print(f"longrun run: {exc}", file=stream)
        return EXIT_INVALID
    except (ServeError, RuntimeUnavailable) as exc:
        print(f"longrun run: the model deployment did not start: {exc}", file=stream)
        return EXIT_FAILED
    try:
        with _sigint_stops(local.stop):
            if local.resolved.spec.is_scheduled:
                return run_scheduled(local, follow=args.follow_schedule)
            return finish(local, run_occurrence(local, job_name=local.resolved.child_name))
    finally:
        for stop in local.cleanups:  # the deployments started for this run
            stop()


def prepare(args: argparse.Namespace, *, console: Console) -> LocalRun:
    """Load, validate and resolve; InputError (or SettingsError) when anything is wrong."""
    settings = settings_from_env(os.environ)
    inputs = load_inputs(args.files, namespace=args.namespace)
    add_env_files(inputs, args.env_file, namespace=args.namespace)
    apply_overrides(inputs, args.overrides)
    run = pick_run(inputs, args.run, namespace=args.namespace)
    using = DeploymentsForRun(
        inputs,
        work_dir=args.work_dir,
        console=console,
        pythons=pairs(args.runtime_python, "--runtime-python"),
        claims=pairs(args.pvc, "--pvc"),
        allow_generic=args.allow_generic,
    )
    try:
        resolved = resolve_run(run, inputs, settings=settings, deployments=using.lookup(run))
        if model_token(resolved.config_spec) is not None:
            raise InputError(LOCAL_TOKEN)
    except BaseException:
        using.stop()
        raise
    images = ImageMap(settings.default_runner_image, parse_image_map(args.image_map))
    run_dir = Path(args.work_dir).resolve() / "runs" / resolved.run.namespace / resolved.run.name
    local = LocalRun(resolved, settings, inputs, images, run_dir, console)
    local.cleanups.append(using.stop)
    local.output = getattr(args, "output", None)
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


if __name__ == "__main__":
    sys.exit(main())
