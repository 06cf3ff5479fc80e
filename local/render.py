"""`longrun render`: the ConfigMap and the Job or CronJob the controller would create for a run.

Like `helm template`, a way to see what a run becomes before it is applied, to diff it
in review, or to hand it to a cluster without the controller. Nothing is re-implemented:
the files are validated and the run resolved exactly as `longrun run` does
(`local.inputs`: `longrun validate`'s checks, the controller's `resolve`), and the
manifests are the controller's pure builders' output for the same resolved run, in the
order the controller writes them (`controller.core.decide`).

What only a cluster knows is filled in as `longrun run` fills it in: the run's UID is the
deterministic local one (`local.inputs.run_uid`), and a `generateName` run gets a name
completed as the API server completes it. Settings are the controller's, from the same
environment variables (DEFAULT_RUNNER_IMAGE, ALLOWED_IMAGES, ...).

Exit codes, as `longrun validate`: 0 rendered, 1 invalid input (one line per problem, the
file, object and field named), 2 usage error (a missing file, no run or several to pick from).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

import yaml

from controller.core import builders
from controller.core.builders import Manifest, Resolved
from controller.core.settings import Settings, SettingsError, settings_from_env
from controller.validate import expand_paths
from local.inputs import InputError, Inputs, add_files_option, load_inputs, pick_run, resolve_run

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `render` to the `longrun` subcommands (handler: `handle`)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "render",
        help="print the ConfigMap and Job/CronJob the controller would create for a run",
        description="Print the ConfigMap and the Job (or CronJob, for a scheduled run) the "
        "controller creates for an InferenceRun, built by the controller's own builders.",
    )
    add = parser.add_argument
    add("run", nargs="?", metavar="RUN", help="InferenceRun name or generateName, if several")
    add_files_option(parser, holding="InferenceConfig, InferenceRun, Secret")
    add("-n", "--namespace", default="default", help="namespace of objects without one")
    add("-o", "--output", choices=["yaml", "json"], default="yaml", help="yaml (default), json")
    parser.set_defaults(handler=handle)
    return parser


def handle(
    args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the command; returns the exit code."""
    errors = err or sys.stderr
    try:
        expand_paths(args.files)
        settings = settings_from_env()
    except (FileNotFoundError, SettingsError) as exc:
        print(f"longrun render: {exc}", file=errors)
        return EXIT_USAGE
    try:
        inputs = load_inputs(args.files, namespace=args.namespace)
    except InputError as exc:
        print(str(exc), file=errors)
        return EXIT_INVALID
    try:
        run = pick_run(inputs, args.run, namespace=args.namespace)
    except InputError as exc:
        print(f"longrun render: {exc}", file=errors)
        return EXIT_USAGE
    try:
        resolved = resolve_for_render(run, inputs, settings=settings)
    except InputError as exc:
        print(f"longrun render: {exc}", file=errors)
        return EXIT_INVALID
    try:
        (out or sys.stdout).write(dump(manifests(resolved, settings), output=args.output))
        (out or sys.stdout).flush()
    except BrokenPipeError:  # `longrun render ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


def resolve_for_render(run: dict[str, Any], inputs: Inputs, *, settings: Settings) -> Resolved:
    """The run resolved as the controller resolves it; a ModelDeployment it uses is the one
    in the files (the controller waits until it serves, so one without a status is refused)."""
    return resolve_run(
        run,
        inputs,
        settings=settings,
        deployments=lambda ns, name: (
            inputs.deployments.get((ns, name)) or inputs.inference_models.get((ns, name))
        ),
    )


def manifests(resolved: Resolved, settings: Settings) -> list[Manifest]:
    """What the controller creates for the run, in its order: the ConfigMap, then the Job (a
    one-shot run) or the CronJob (a scheduled run)."""
    child = builders.build_cron_job if resolved.spec.is_scheduled else builders.build_job
    return [builders.build_config_map(resolved, settings), child(resolved, settings)]


def dump(objects: list[Manifest], *, output: str) -> str:
    """YAML documents (`---` between them), or a JSON `v1` List, as `kubectl get -o` prints."""
    if output == "json":
        listed = {"apiVersion": "v1", "kind": "List", "items": objects}
        return json.dumps(listed, indent=2) + "\n"
    return "---\n".join(
        yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=1 << 16) for obj in objects
    )


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the contract JSON) as `|` blocks a person can read."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    block = "\n" in value and not any(line != line.rstrip() for line in value.splitlines())
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if block else None)


_Dumper.add_representer(str, _text)
