"""The `longrun` command line.

Exit codes: 0 success/valid, 1 invalid input found, 2 usage error (bad flags,
missing files) — the convention the issue tracker asked for, so scripts can tell
"your YAML is wrong" from "you called me wrong".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from batchapi.cli import add_parser as add_batch_api_parser
from contracts.contract import contract_json_schema
from controller import __version__
from controller.catalog import add_parser as add_catalog_parser
from controller.core.settings import SettingsError, settings_from_env
from controller.crds import CRD_DIR, crd_files, write_crds
from controller.runtime.main import add_parser as add_controller_parser
from controller.validate import check_file, expand_paths
from local.inputs import add_files_option
from local.render import add_parser as add_render_parser
from local.run import add_parser as add_run_parser
from local.serve import add_parser as add_serve_parser

CONTRACT_SCHEMA_FILE = Path("contracts") / "contract-v1.schema.json"
EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def schema_text() -> str:
    """The contract JSON Schema exactly as committed to the repository."""
    return json.dumps(contract_json_schema(), indent=2, sort_keys=True) + "\n"


def _cmd_crds(args: argparse.Namespace) -> int:
    if not args.write:
        sys.stdout.write("---\n".join(crd_files().values()))
        return EXIT_OK
    for path in write_crds(Path(args.dir)):
        print(f"wrote {path}")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    if args.write:
        Path(args.write).write_text(schema_text())
        print(f"wrote {args.write}")
    else:
        sys.stdout.write(schema_text())
    return EXIT_OK


def _cmd_validate(args: argparse.Namespace) -> int:
    try:
        files = expand_paths(args.files)
    except FileNotFoundError as exc:
        print(f"longrun validate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = settings_from_env()
    except SettingsError as exc:
        print(f"longrun validate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    results = [checked for path in files for checked in check_file(path, settings=settings)]
    findings = [f for checked in results for f in checked.findings]
    for finding in findings:
        print(finding, file=sys.stderr)
    if not args.quiet:
        for checked in results:
            if not checked.findings:
                print(f"{checked.file}: {checked.object}: valid")
    if not results:
        print(
            "longrun validate: no InferenceConfig or InferenceRun found",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return EXIT_INVALID if findings else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="longrun",
        description="longrun: long-running and scheduled inference runs on Kubernetes.",
        epilog="Exit codes: 0 ok, 1 invalid input, 2 usage error"
        " (`longrun run`: 0 succeeded, 1 run failed, 2 invalid input, 130 interrupted).",
    )
    parser.add_argument("--version", action="version", version=f"longrun {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    crds = sub.add_parser("crds", help="print (or --write) the CRDs generated from the schemas")
    crds.add_argument("--write", action="store_true", help="write them into --dir")
    crds.add_argument("--dir", default=str(CRD_DIR), help="target directory (%(default)s)")
    crds.set_defaults(handler=_cmd_crds)

    schema = sub.add_parser("schema", help="print a JSON Schema")
    schema.add_argument("which", choices=["contract"], help="contract: the runner contract v1")
    schema.add_argument("--write", metavar="FILE", help="write to FILE instead of stdout")
    schema.set_defaults(handler=_cmd_schema)

    validate = sub.add_parser("validate", help="validate InferenceConfig/InferenceRun YAML offline")
    add_files_option(validate, holding="InferenceConfig, InferenceRun, Model, ModelDeployment")
    validate.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    validate.set_defaults(handler=_cmd_validate)

    add_render_parser(sub)
    add_run_parser(sub)
    add_serve_parser(sub)
    add_controller_parser(sub)
    add_catalog_parser(sub)
    add_batch_api_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `longrun` console script."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
