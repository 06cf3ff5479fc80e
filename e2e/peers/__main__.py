"""``python -m e2e.peers``: prepare, list and serve the real model servers.

Why a CLI: CI and developers build the slow envs ahead of time (``prepare``), and the quickstart
needs a server running outside pytest (``serve`` prints its URLs as one JSON line on stdout and
runs until SIGINT/SIGTERM). Progress goes to stderr so stdout stays machine-readable.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType

from e2e.peers.envs import EnvBuildError, cache_root, ensure_env, env_path, is_ready
from e2e.peers.server import PeerStartError, start
from e2e.peers.specs import ENVS, SERVERS, UnknownPeerError, env_names_for


def _say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def cmd_prepare(names: Sequence[str]) -> int:
    """Build (or reuse) the envs of ``names`` (all if empty), printing timings."""
    failed = 0
    for env_name in env_names_for(list(names) or list(ENVS)):
        try:
            env = ensure_env(env_name, progress=_say)
        except EnvBuildError as exc:
            _say(f"{env_name}: FAILED\n{exc}")
            failed += 1
            continue
        how = "built" if env.built_now else "reused"
        _say(f"{env_name}: {how} in {env.seconds:.1f}s -> {env.path}")
    return 1 if failed else 0


def cmd_list() -> int:
    """One line per server: name, env readiness, protocols, models."""
    _say(f"cache: {cache_root()}")
    for spec in SERVERS.values():
        state = "ready" if is_ready(env_path(spec.env)) else "not built"
        protocols = ",".join(spec.protocols)
        print(f"{spec.name:18} env={spec.env:9} {state:10} {protocols:10} {','.join(spec.models)}")
    return 0


def cmd_serve(name: str, *, ports: dict[str, int], timeout: float | None) -> int:
    """Start ``name``, print its URLs as JSON, block until SIGINT/SIGTERM or the server dies."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    started = time.monotonic()
    with start(name, ports=ports, timeout=timeout, progress=_say) as server:
        _say(f"{name}: ready in {time.monotonic() - started:.1f}s (log {server.log_path})")
        print(json.dumps(server.describe()), flush=True)
        while not stop.wait(0.5):
            if not server.is_running():
                _say(f"{name}: exited with {server.process.returncode}; see {server.log_path}")
                return 1
        _say(f"{name}: stopping")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m e2e.peers", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prepare = sub.add_parser("prepare", help="build the server envs (all if no names)")
    prepare.add_argument("names", nargs="*", help=f"envs or servers: {', '.join(ENVS)}")
    sub.add_parser("list", help="list servers and whether their env is built")
    serve = sub.add_parser("serve", help="run one server until SIGINT/SIGTERM")
    serve.add_argument("name", choices=sorted(SERVERS))
    serve.add_argument("--http-port", type=int, help="default: a free port")
    serve.add_argument("--grpc-port", type=int, help="default: a free port")
    serve.add_argument("--timeout", type=float, help="readiness timeout in seconds")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "prepare":
            return cmd_prepare(args.names)
        if args.command == "list":
            return cmd_list()
        ports = {k: v for k, v in (("http", args.http_port), ("grpc", args.grpc_port)) if v}
        return cmd_serve(args.name, ports=ports, timeout=args.timeout)
    except (UnknownPeerError, EnvBuildError, PeerStartError) as exc:
        _say(f"error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
