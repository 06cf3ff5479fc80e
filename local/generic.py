"""A `generic` runtime served on this machine: only when asked for, shown before it runs, with
the deployment's own environment (issue 26).

In a cluster, a generic ModelDeployment's `command` and `args` run in its image, in a pod.
`longrun serve` (and `longrun run`, for a deployment its files name) runs them here, as the
user who typed the command: whoever wrote the files chooses what runs on this machine. So:

- it needs `--allow-generic`; without it the command refuses, naming the flag and the
  command line that would run;
- the command line is printed before it runs, as it will run (paths made local);
- the process gets the pod's environment (the deployment's `spec.env` with its Secrets from
  the files, and what longrun sets: MODEL_PATH, MODEL_NAME, HOME, TMPDIR,
  TERMINATION_MESSAGE_PATH), plus the few variables a program needs to start on this machine
  (`HOST_ENV`), never the rest of the user's environment (tokens, cloud credentials...).

The other runtimes run servers longrun knows (local/runtimes.py), from their cached
environments; their commands come from the controller's runtime table, not from the files.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from local.inputs import InputError

if TYPE_CHECKING:  # local.deployment imports this module
    from local.deployment import LocalDeployment

FLAG = "--allow-generic"
# What a program needs from this machine to start: where programs are, the locale, the time
# zone. Everything else of the user's environment stays out.
HOST_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def host_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of this machine a generic server gets (`HOST_ENV`, where set)."""
    env = os.environ if env is None else env
    return {name: env[name] for name in HOST_ENV if name in env}


def add_flag(parser: argparse.ArgumentParser) -> None:
    """`--allow-generic`, for `longrun serve` and `longrun run`."""
    parser.add_argument(
        FLAG,
        action="store_true",
        help="run a ModelDeployment's generic command on this machine (printed first; it gets "
        "the deployment's environment only)",
    )


def check(local: LocalDeployment, *, allowed: bool, program: str) -> None:
    """InputError for a generic runtime the user did not allow, before anything runs."""
    r = local.resolved
    check_allowed(
        kind=r.plan.kind,
        deployment=f"{r.owner.namespace}/{r.owner.name}",
        command=[*r.plan.command, *r.plan.args],
        allowed=allowed,
        program=program,
    )


def check_allowed(
    *, kind: str, deployment: str, command: Sequence[str], allowed: bool, program: str
) -> None:
    """InputError unless a generic runtime was allowed (`--allow-generic`) by the user."""
    if kind != "generic" or allowed:
        return
    shown = shlex.join(command) if command else "(the image's entrypoint, from --image-map)"
    raise InputError(
        f"ModelDeployment {deployment}: runtime generic would run its command on this machine "
        f"as you: {shown}; {program} runs it only with {FLAG} (it then gets the deployment's "
        "environment only)"
    )


def announcement(deployment: str, argv: Sequence[str], env: Mapping[str, str]) -> str:
    """What is printed before a generic server starts: its command line and its variables."""
    names = ", ".join(sorted(env)) or "none"
    return (
        f"longrun: ModelDeployment {deployment}: running its generic command on this machine "
        f"({FLAG}): {shlex.join(argv)} (environment: {names})"
    )


def to_stderr(text: str) -> None:
    """Where a generic server's command line goes by default: the terminal (stderr)."""
    print(text, file=sys.stderr, flush=True)
