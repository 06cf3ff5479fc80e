"""Local-only: each runtime image of a ModelDeployment mapped to the same server as a local process.

`longrun serve` (and `longrun run`, for a deployment it starts) renders the server pod with
the controller's builders, then runs its containers here instead of their images: the
runtime's container spec is read and translated, flag by flag, into the command of the
same server installed from PyPI (docs/serving.md, "Locally"). This mapping is for tests
and a first try only; a cluster always runs the images.

| runtime | local command |
| --- | --- |
| llamacpp | llama-cpp-python's server (`python -m llama_cpp.server`), key from `API_KEY` |
| kserve | KServe's Python server (`local/servers/kserve_model.py`) on the model file |
| mlserver | `mlserver start <dir>` with the container's `MLSERVER_*` variables |
| triton | PyTriton (`local/servers/triton_onnx.py`), with onnxruntime in that env |
| generic | its own `command`/`args`, if the program is installed |

Where the servers come from: `--runtime-python RUNTIME=PYTHON`, else the variable
`LONGRUN_<RUNTIME>_PYTHON`, else the virtualenvs `python -m e2e.peers prepare` caches under
`$LONGRUN_PEERS_CACHE` (default ~/.cache/longrun/peers), else this Python if it has the
package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.core.serving.resolve import ServingResolved

Obj = dict[str, Any]
SERVERS_DIR = Path(__file__).resolve().parent / "servers"
# The peers' env holding each runtime's server (e2e/peers/specs.py), and the module it imports.
PEER_ENVS = {"llamacpp": "llama", "kserve": "kserve", "mlserver": "mlserver", "triton": "triton"}
MODULES = {
    "llamacpp": "llama_cpp",
    "kserve": "kserve",
    "mlserver": "mlserver",
    "triton": "pytriton",
}


class RuntimeUnavailable(Exception):
    """The runtime has no local command on this machine."""


@dataclass(frozen=True)
class LocalServer:
    """The server container as a local process: its argv prefix and translated container."""

    prefix: tuple[str, ...]
    container: Obj
    ready_path: str  # GET this (with the key) until it answers 200
    env: Mapping[str, str]  # extra environment (LD_LIBRARY_PATH for PyTriton)


def find_python(runtime: str, overrides: Mapping[str, str]) -> str:
    """The interpreter that runs `runtime`'s server (see the module docstring)."""
    if runtime in overrides:
        return overrides[runtime]
    if found := os.environ.get(f"LONGRUN_{runtime.upper()}_PYTHON"):
        return found
    root = Path(os.environ.get("LONGRUN_PEERS_CACHE") or Path.home() / ".cache/longrun/peers")
    envs = sorted(root.glob(f"{PEER_ENVS[runtime]}-*/.longrun-ready.json"), reverse=True)
    for ready in envs:
        python = ready.parent / "bin" / "python"
        if python.exists():
            return str(python)
    if importlib.util.find_spec(MODULES[runtime]) is not None:
        return sys.executable
    raise RuntimeUnavailable(
        f"runtime {runtime}: no local {MODULES[runtime]} server found; run `python -m e2e.peers "
        f"prepare {PEER_ENVS[runtime]}` or pass --runtime-python {runtime}=/path/to/python"
    )


def local_server(
    r: ServingResolved, container: Obj, *, port: int, pythons: Mapping[str, str]
) -> LocalServer:
    """The rendered server container translated to its local command, listening on `port`."""
    kind = r.plan.kind
    if kind == "generic":
        return _generic(r, container, port)
    python = find_python(kind, pythons)
    build = {"llamacpp": _llamacpp, "kserve": _kserve, "mlserver": _mlserver, "triton": _triton}
    return build[kind](r, container, python, port)


def _flags(args: list[str]) -> dict[str, str]:
    """`--flag value` and `--flag=value` pairs (a bare flag maps to "")."""
    found: dict[str, str] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        if "=" in arg:
            key, _, value = arg.partition("=")
            found[key] = value
        elif index + 1 < len(args) and not args[index + 1].startswith("--"):
            found[arg] = args[index + 1]
            index += 1
        else:
            found[arg] = ""
        index += 1
    return found


def _with(container: Obj, *, args: list[str], env: list[Obj] | None = None) -> Obj:
    out = {**container, "args": args}
    out.pop("command", None)
    if env is not None:
        out["env"] = env
    return out


def _llamacpp(r: ServingResolved, container: Obj, python: str, port: int) -> LocalServer:
    # llama.cpp's flags → llama-cpp-python's; the key comes from the Secret as API_KEY (never
    # on the command line); llama-cpp-python checks one key: the first.
    flags = _flags(list(container.get("args") or []))
    args = ["--model", flags["--model"], "--model_alias", flags["--alias"]]
    args += ["--host", "127.0.0.1", "--port", str(port), "--verbose", "false"]
    args += ["--n_gpu_layers", flags.get("--n-gpu-layers", "0")]
    if "--ctx-size" in flags:
        args += ["--n_ctx", flags["--ctx-size"]]
    args += ["--embedding", "true" if "--embedding" in flags else "false"]
    env = list(container.get("env") or [])
    if r.spec.auth.enabled:
        key = {"name": _secret(r), "key": "api-key"}
        env.append({"name": "API_KEY", "valueFrom": {"secretKeyRef": key}})
    local = _with(container, args=args, env=env)
    return LocalServer((python, "-m", "llama_cpp.server"), local, "/v1/models", {})


def _secret(r: ServingResolved) -> str:
    from controller.core.serving.names import api_key_secret_name

    return api_key_secret_name(r.owner.name)


def _kserve(r: ServingResolved, container: Obj, python: str, port: int) -> LocalServer:
    flags = _flags(list(container.get("args") or []))
    args = [
        f"--model_name={flags['--model_name']}",
        f"--model_dir={flags['--model_dir']}",
        f"--http_port={port}",
    ]
    script = (python, str(SERVERS_DIR / "kserve_model.py"))
    return LocalServer(script, _with(container, args=args), r.plan.health_path or "/", {})


def _mlserver(r: ServingResolved, container: Obj, python: str, port: int) -> LocalServer:
    from local.ports import free_port

    ports = {
        "MLSERVER_HOST": "127.0.0.1",
        "MLSERVER_HTTP_PORT": str(port),
        "MLSERVER_GRPC_PORT": str(free_port()),
        "MLSERVER_METRICS_PORT": str(free_port()),
    }
    env = [
        {**var, "value": ports[var["name"]]} if var.get("name") in ports else var
        for var in container.get("env") or []
    ]
    command = list(container.get("command") or [])
    # `mlserver` through the env's Python: a console script's shebang may name the directory
    # the env was built in before it was moved into place (e2e/peers builds it that way).
    prefix = (python, "-c", "import sys; from mlserver.cli import main; sys.exit(main())")
    local = _with(container, args=command[1:], env=env)
    return LocalServer(prefix, local, r.plan.health_path or "/v2/health/ready", {})


def _triton(r: ServingResolved, container: Obj, python: str, port: int) -> LocalServer:
    flags = _flags(list(container.get("args") or []))
    args = [
        f"--model-repository={flags['--model-repository']}",
        f"--http-port={port}",
        f"--model-name={r.served_name}",
    ]
    libdir = _libdir(python)
    script = (python, str(SERVERS_DIR / "triton_onnx.py"))
    env = {"LD_LIBRARY_PATH": libdir} if libdir else {}
    return LocalServer(script, _with(container, args=args), "/v2/health/ready", env)


def _libdir(python: str) -> str:
    # PEERS.md: PyTriton's backend stub loads the system libpython unless told otherwise.
    ready = Path(python).parent.parent / ".longrun-ready.json"
    if not ready.exists():
        return ""
    import json

    return str(json.loads(ready.read_text()).get("libdir") or "")


def _generic(r: ServingResolved, container: Obj, port: int) -> LocalServer:
    command = list(container.get("command") or [])
    args = [str(a).replace(str(r.plan.http_port), str(port)) for a in container.get("args") or []]
    if not command:
        raise RuntimeUnavailable(
            "runtime generic: the image's own entrypoint cannot run locally; set "
            "spec.runtime.generic.command"
        )
    local = _with(container, args=[*command[1:], *args])
    return LocalServer((command[0],), local, r.plan.health_path or "/", {})
