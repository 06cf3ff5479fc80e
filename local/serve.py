"""`longrun serve -f FILE`: run a ModelDeployment on this machine, the way a cluster would.

The files are validated like `longrun validate`, the deployment resolved and run as
`local.deployment` describes; the command prints the endpoint and the file holding the API
key, never a key, and serves until Ctrl-C or SIGTERM. While it serves, its `serving.json`
tells `longrun run` (same `--work-dir`) where the deployment is (`served`); a run whose
deployment nobody serves starts it for the run's duration (`DeploymentsForRun`).
Exit codes: 0 stopped by Ctrl-C or SIGTERM, 1 the server failed, 2 invalid input.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from contracts.serving import API_KEY_SECRET_KEY
from controller.core.serving import names, uses
from controller.core.serving.settings import local_serving_settings
from controller.core.serving.uses import Target
from controller.core.settings import SettingsError
from local import generic
from local.deployment import (
    STATE_FILE,
    LocalDeployment,
    ServeError,
    deployment_dir,
    local_deployment,
)
from local.inputs import InputError, Inputs, add_env_files, add_files_option, load_inputs
from local.podspec import image_repository
from local.runtimes import RuntimeUnavailable

Obj = dict[str, Any]
EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
DEFAULT_WORK_DIR = ".longrun"
__all__ = ["DeploymentsForRun", "ServeError", "add_parser", "pairs", "served"]


def served(work_dir: str | Path, namespace: str, name: str) -> Obj | None:
    """The state of a deployment `longrun serve` serves now (its process alive), else None."""
    path = deployment_dir(work_dir, namespace, name) / STATE_FILE
    try:
        state: Obj = json.loads(path.read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError):
        return None
    return state


def as_deployment(state: Obj) -> Obj:
    """A served deployment as the ModelDeployment a run resolves (Available, its endpoint)."""
    name = str(state["name"])
    status = {
        "phase": "Running",
        "endpoint": state["endpoint"],
        "protocol": state["protocol"],
        "modelName": state["modelName"],
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "reason": "MinimumReplicasAvailable",
                "lastTransitionTime": "1970-01-01T00:00:00Z",
            }
        ],
    }
    if state.get("apiKeyFile"):
        status["apiKeySecret"] = names.api_key_secret_name(name)
    meta = {"name": name, "namespace": state["namespace"]}
    return {"kind": "ModelDeployment", "metadata": meta, "spec": {}, "status": status}


def key_secret(state: Obj) -> tuple[str, dict[str, bytes]] | None:
    """The (name, data) of the Secret a run reads the key from, for a served deployment."""
    path = state.get("apiKeyFile")
    if not path:
        return None
    key = Path(str(path)).read_bytes().strip()
    return names.api_key_secret_name(str(state["name"])), {API_KEY_SECRET_KEY: key}


class DeploymentsForRun:
    """The ModelDeployment a run's config names, for `longrun run`: one `longrun serve`
    serves now, or one of the files, started for the run's duration (`stop` ends it)."""

    def __init__(
        self,
        inputs: Inputs,
        *,
        work_dir: str | Path,
        console: Any,
        pythons: Mapping[str, str] | None = None,
        claims: Mapping[str, str] | None = None,
        allow_generic: bool = False,
    ) -> None:
        self.inputs = inputs
        self.work_dir = work_dir
        self.console = console
        self.pythons = pythons or {}
        self.claims = claims or {}
        self.allow_generic = allow_generic  # --allow-generic (local/generic.py)
        self.started: list[LocalDeployment] = []

    def lookup(self, run: Obj) -> Callable[[str, str], Obj | None]:
        """The deployments lookup `resolve` takes, starting the one the run needs first."""
        target = self._target(run)
        found = self._serve(run, target) if target is not None else None
        wanted = (target.namespace, target.name) if target is not None else None

        def lookup(namespace: str, name: str) -> Obj | None:
            return found if (namespace, name) == wanted else None

        return lookup

    def _target(self, run: Obj) -> Target | None:
        ref = (run.get("spec") or {}).get("configRef") or {}
        namespace = ref.get("namespace") or run["metadata"].get("namespace", "")
        config = self.inputs.configs.get((namespace, ref.get("name", "")))
        return uses.target_of(config) if config is not None else None

    def _serve(self, run: Obj, target: Target) -> Obj | None:
        if target.kind == "InferenceModel":
            raise InputError(
                f"InferenceModel {target.key}: external hosts are placed and published by the "
                "controller, which `longrun run` does not run; run it on a cluster, or call a "
                "host directly with model.url, model.protocol and model.name"
            )
        state = served(self.work_dir, target.namespace, target.name)
        if state is None:
            obj = self.inputs.deployments.get((target.namespace, target.name))
            if obj is None:
                return None
            local = local_deployment(
                obj,
                self.inputs,
                local_serving_settings(),
                work_dir=self.work_dir,
                pythons=self.pythons,
                claims=self.claims,
            )
            check_served_here(local)
            generic.check(local, allowed=self.allow_generic, program="longrun run")
            local.announce = self.console.say
            local.secrets = namespace_secrets(self.inputs, target.namespace)
            self.console.say(f"longrun: starting ModelDeployment {target.key} for this run")
            local.start()
            self.started.append(local)
            self.console.say(f"longrun: ModelDeployment {target.key} serves at {local.endpoint}")
            state = served(self.work_dir, target.namespace, target.name)
            assert state is not None
        secret = key_secret(state)
        if secret is not None:  # the run reads the key from a Secret of its own namespace
            namespace = run["metadata"].get("namespace", "")
            self.inputs.secrets[(namespace, secret[0])] = secret[1]
        return as_deployment(state)

    def stop(self) -> None:
        """Stop what was started for the run."""
        for local in self.started:
            local.stop()
        self.started.clear()


# -- the command ----------------------------------------------------------------------------------


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `serve` to the `longrun` subcommands (handler: `handle`)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="serve a ModelDeployment locally, without a cluster",
        description="Serve a ModelDeployment on this machine: same pod as in a cluster, its "
        "runtime mapped to the same server installed locally (local-only).",
    )
    add = parser.add_argument
    add("name", nargs="?", metavar="NAME", help="ModelDeployment name (if the files hold several)")
    add_files_option(parser, holding="ModelDeployment, Model")
    add("-n", "--namespace", default="default", help="namespace of objects without one")
    add("--port", type=int, default=0, help="port to serve on (default: a free one)")
    add("--work-dir", default=DEFAULT_WORK_DIR, help="local state directory (%(default)s)")
    add("--runtime-python", action="append", default=[], metavar="RUNTIME=PYTHON",
        help="the Python with RUNTIME's server (llamacpp, kserve, mlserver, triton)")  # fmt: skip
    add("--pvc", action="append", default=[], metavar="CLAIM=DIR",
        help="a local directory standing in for a PersistentVolumeClaim")  # fmt: skip
    add("--env-file", action="append", default=[], metavar="NAME=PATH",
        help="Secret NAME (e.g. the Model's credentials) from KEY=VALUE lines")  # fmt: skip
    add("--model-source", metavar="URI",
        help="local-only: take the model from URI instead of the Model's source")  # fmt: skip
    add("--model-endpoint-url", metavar="URL",
        help="local-only: the S3 endpoint to download the model from instead")  # fmt: skip
    add("--image-map", action="append", default=[], metavar="IMAGE=COMMAND",
        help="runtime generic: run IMAGE (any tag) as COMMAND, its entrypoint")  # fmt: skip
    generic.add_flag(parser)
    parser.set_defaults(handler=handle)
    return parser


def pairs(entries: list[str], flag: str) -> dict[str, str]:
    """`KEY=VALUE` flags as a dict; ValueError naming the flag when malformed."""
    found = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{flag} {entry!r}: expected KEY=VALUE")
        found[key] = value
    return found


def pick_deployment(inputs: Inputs, name: str | None, *, namespace: str) -> Obj:
    """The deployment to serve: the one named, or the only one."""
    if name is not None:
        found = inputs.deployments.get((namespace, name))
        if found is None:
            raise InputError(f'no ModelDeployment "{namespace}/{name}" in the given files')
        return found
    if len(inputs.deployments) != 1:
        listed = ", ".join(f"{ns}/{n}" for ns, n in sorted(inputs.deployments)) or "none"
        raise InputError(f"name the ModelDeployment to serve (found: {listed})")
    return next(iter(inputs.deployments.values()))


def prepare(args: argparse.Namespace) -> LocalDeployment:
    """Load, validate and resolve; InputError (or ValueError) when anything is wrong."""
    settings = local_serving_settings()
    inputs = load_inputs(args.files, namespace=args.namespace)
    add_env_files(inputs, args.env_file, namespace=args.namespace)
    obj = pick_deployment(inputs, args.name, namespace=args.namespace)
    obj = with_local_overrides(obj, inputs, args)
    local = local_deployment(
        obj,
        inputs,
        settings,
        work_dir=args.work_dir,
        port=args.port,
        pythons=pairs(args.runtime_python, "--runtime-python"),
        claims=pairs(args.pvc, "--pvc"),
    )
    check_served_here(local)
    generic.check(local, allowed=args.allow_generic, program="longrun serve")
    local.secrets = namespace_secrets(inputs, local.resolved.owner.namespace)
    credentials = local.resolved.model.credentials
    if credentials is not None and credentials.name not in local.secrets:
        raise InputError(
            f"the model's credentials are in Secret {credentials.name!r}: give it in the files "
            f"or with --env-file {credentials.name}=PATH (KEY=VALUE lines)"
        )
    return local


def namespace_secrets(inputs: Inputs, namespace: str) -> dict[str, dict[str, bytes]]:
    """The Secrets of the files (and --env-file) in `namespace`, by name."""
    return {name: data for (ns, name), data in inputs.secrets.items() if ns == namespace}


def with_local_overrides(obj: Obj, inputs: Inputs, args: argparse.Namespace) -> Obj:
    """The deployment with the local-only overrides applied (the files are left as they are):
    the model's source and S3 endpoint, and a generic runtime's image as a local command."""
    obj = copy.deepcopy(obj)
    spec = obj.setdefault("spec", {})
    model: Obj | None = spec.get("model")
    if model is None and (args.model_source or args.model_endpoint_url):
        ref = (spec.get("modelRef") or {}).get("name", "")
        namespace = (spec.get("modelRef") or {}).get("namespace") or obj["metadata"]["namespace"]
        found = inputs.models.get((namespace, ref))
        if found is None:
            raise InputError(f'no Model "{namespace}/{ref}" in the given files to override')
        found = copy.deepcopy(found)
        inputs.models[(namespace, ref)] = found
        model = found.setdefault("spec", {})
    if model is not None and args.model_source:
        model["source"] = args.model_source
    if model is not None and args.model_endpoint_url:
        model["endpointUrl"] = args.model_endpoint_url
    generic = (spec.get("runtime") or {}).get("generic")
    if generic is None and args.image_map:
        raise InputError("--image-map: only a generic runtime's image runs as a local command")
    if generic is not None and not generic.get("command"):
        generic["command"] = _entrypoint(str(generic.get("image", "")), args.image_map)
    return obj


def _entrypoint(image: str, entries: list[str]) -> list[str]:
    """The local command standing in for a generic image's entrypoint (the deployment sets
    no `command`); relative paths of existing files made absolute, since the server runs in
    a directory of its own."""
    mapped = {}
    for entry in entries:
        key, sep, command = entry.partition("=")
        if not sep or not key or not command.strip():
            raise ValueError(f"--image-map {entry!r}: expected IMAGE=COMMAND")
        mapped[key] = shlex.split(command)
    argv = mapped.get(image) or mapped.get(image_repository(image))
    if argv is None:
        raise InputError(
            f"runtime generic: image {image!r} cannot run here; name the local command that "
            f"stands in for it: --image-map {image_repository(image)}=COMMAND"
        )
    return [os.path.abspath(a) if not a.startswith("-") and Path(a).is_file() else a for a in argv]


def check_served_here(local: LocalDeployment) -> None:
    """InputError for what `longrun serve` cannot serve as a cluster would."""
    r = local.resolved
    if r.plan.kind == "triton" and r.plan.protocol == "triton-grpc":
        raise InputError(
            f"ModelDeployment/{r.owner.name}: spec.runtime.triton.protocol: grpc is served in "
            "a cluster only; locally Triton serves HTTP: set protocol: http to serve it here"
        )


def handle(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Serve until Ctrl-C or SIGTERM; returns the exit code."""
    stream = out or sys.stderr
    try:
        local = prepare(args)
    except (InputError, SettingsError, ValueError) as exc:
        print(f"longrun serve: {exc}", file=stream)
        return EXIT_INVALID
    local.announce = lambda text: print(text, file=stream, flush=True)
    stop = threading.Event()
    with _signals_stop(stop):
        try:
            local.start()
        except (ServeError, RuntimeUnavailable) as exc:
            print(f"longrun serve: {exc}", file=stream)
            return EXIT_FAILED
        r = local.resolved
        print(
            f"ModelDeployment {r.owner.namespace}/{r.owner.name}: Running, serving model "
            f"{r.served_name!r} ({r.plan.kind}, protocol {r.plan.protocol}) at {local.endpoint}",
            file=stream,
            flush=True,
        )
        if r.spec.auth.enabled:
            print(
                f"API key: in {local.key_file} (send `Authorization: Bearer <key>`)",
                file=stream,
                flush=True,
            )
        print(f"logs: {local.base}/*.log; Ctrl-C stops it", file=stream, flush=True)
        code = _serve_until(local, stop)
    return code


def _serve_until(local: LocalDeployment, stop: threading.Event) -> int:
    while not stop.wait(0.5):
        if any(p.poll() is not None for p in local.processes):
            local.stop()
            return EXIT_FAILED
    local.stop()
    return EXIT_OK


@contextmanager
def _signals_stop(stop: threading.Event) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    """`longrun serve` as a standalone command (`python -m local.serve`)."""
    parser = argparse.ArgumentParser(prog="longrun")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return int(handle(parser.parse_args(["serve", *(argv or sys.argv[1:])])))


if __name__ == "__main__":
    sys.exit(main())
