"""Start a real model server in its own env and process group; stop it without leftovers.

Why a process group: several servers fork (Triton's C++ server and Python backend stubs,
uvicorn workers). Signalling the whole group on stop, then killing what is left, is the only way
to guarantee that no orphan keeps a port or memory after a test session.

Readiness is polled (an HTTP GET on the server's ready path plus a TCP connect on every other
port) with a deadline; a server that exits or never becomes ready raises ``PeerStartError``
carrying the tail of its log, which is the first thing anyone debugging it needs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from e2e.peers.envs import PreparedEnv, Progress, cache_root, ensure_env, tail
from e2e.peers.specs import GRPC, HTTP, ServerSpec, server_spec

HOST = "127.0.0.1"
POLL_SECONDS = 0.2


class PeerStartError(RuntimeError):
    """A server exited or did not become ready; the message ends with its log tail."""


@dataclass
class PeerServer:
    """A running server. Use as a context manager, or call ``stop()`` (safe to repeat)."""

    spec: ServerSpec
    ports: Mapping[str, int]
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    workdir: Path = field(repr=False)
    host: str = HOST  # where it listens (another address in a network namespace: e2e/netns.py)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def model(self) -> str:
        """The (first) model name served."""
        return self.spec.models[0]

    @property
    def models(self) -> tuple[str, ...]:
        return self.spec.models

    @property
    def http_url(self) -> str:
        """Base URL for REST, e.g. ``http://127.0.0.1:41234`` (no trailing slash)."""
        return f"http://{self.host}:{self.ports[HTTP]}"

    @property
    def grpc_url(self) -> str | None:
        """``host:port`` for gRPC clients (tritonclient.grpc, grpc channels), or None."""
        return f"{HOST}:{self.ports[GRPC]}" if GRPC in self.ports else None

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary: URLs per protocol, model names, log, pid."""
        urls = {p: self.grpc_url if p == GRPC else self.http_url for p in self.spec.protocols}
        return {
            "name": self.name,
            "http_url": self.http_url,
            "grpc_url": self.grpc_url,
            "urls": urls,
            "models": list(self.models),
            "log": str(self.log_path),
            "pid": self.process.pid,
        }

    def rss_bytes(self) -> int:
        """Resident memory of every process in the server's group (Linux /proc)."""
        return group_rss_bytes(self.process.pid)

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after the spec's timeout, reap, remove workdir."""
        if self.process.returncode is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=self.spec.stop_timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        _kill_leftovers(self.process.pid)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start(
    name: str,
    *,
    ports: Mapping[str, int] | None = None,
    timeout: float | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    host: str = HOST,
    prefix: Sequence[str] = (),
    model_name: str | None = None,
) -> PeerServer:
    """Start server ``name`` (building its env first if needed) and wait until it is ready.

    ``ports`` fixes some ports by name (``http``, ``grpc``, ``metrics``); the rest are free
    ports on 127.0.0.1. Logs go to ``log_dir`` (default ``<cache>/logs/servers``). ``host``
    is the address it listens on and ``prefix`` a command it runs under (``ip netns exec
    NAME``, e2e/netns.py); ``model_name`` replaces the spec's first model name.
    """
    spec = server_spec(name)
    env = ensure_env(spec.env, cache_dir=cache_dir, progress=progress)
    chosen = _choose_ports((*spec.protocols, *spec.extra_ports), fixed=ports or {})
    logs = Path(log_dir) if log_dir else cache_root(cache_dir) / "logs" / "servers"
    _prune_logs(logs)
    log_path = logs / f"{name}-{chosen[HTTP]}.log"
    workdir = Path(tempfile.mkdtemp(prefix=f"longrun-peer-{name}-"))
    try:
        process = _spawn(
            spec,
            env=env,
            ports=chosen,
            workdir=workdir,
            log_path=log_path,
            where=(host, tuple(prefix), model_name),
        )
    except OSError:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    server = PeerServer(spec, chosen, log_path, process, workdir, host)
    try:
        _wait_ready(server, timeout=timeout or spec.startup_timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _prune_logs(logs: Path, *, max_age_days: float = 3.0) -> None:
    """One log per server start accumulates; drop those older than ``max_age_days``."""
    logs.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - max_age_days * 86400
    for old in logs.glob("*.log"):
        with contextlib.suppress(OSError):
            if old.stat().st_mtime < cutoff:
                old.unlink()


def _spawn(
    spec: ServerSpec,
    *,
    env: PreparedEnv,
    ports: Mapping[str, int],
    workdir: Path,
    log_path: Path,
    where: tuple[str, tuple[str, ...], str | None] = (HOST, (), None),
) -> subprocess.Popen[bytes]:
    host, prefix, model_name = where
    cmd = [
        *prefix,
        str(env.python),
        "-u",
        str(spec.script_path),
        "--host",
        host,
        "--workdir",
        str(workdir),
    ]
    for port_name, port in ports.items():
        cmd += [f"--{port_name}-port", str(port)]
    cmd += ["--model-name", model_name or spec.models[0], *spec.args]
    with log_path.open("wb") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=_environ(spec, env),
            start_new_session=True,  # its own process group: stop() signals all of it
        )


def _environ(spec: ServerSpec, env: PreparedEnv) -> dict[str, str]:
    """The caller's environment, as if the server's env were activated instead of ours."""
    environ = {**os.environ, "PYTHONUNBUFFERED": "1", "VIRTUAL_ENV": str(env.path)}
    environ["PATH"] = f"{env.path / 'bin'}:{environ.get('PATH', '')}"
    environ.pop("PYTHONPATH", None)  # the project's path must not leak into the server env
    for key, template in spec.environ.items():
        value = template.format(libdir=env.libdir)
        environ[key] = f"{value}:{environ[key]}" if environ.get(key) else value
    return environ


def _choose_ports(names: tuple[str, ...], *, fixed: Mapping[str, int]) -> dict[str, int]:
    """Free ports by binding port 0; all sockets stay open until all are chosen (no repeats)."""
    with contextlib.ExitStack() as stack:
        chosen: dict[str, int] = {}
        for port_name in names:
            if port_name in fixed:
                chosen[port_name] = fixed[port_name]
                continue
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            chosen[port_name] = sock.getsockname()[1]
        return chosen


def _wait_ready(server: PeerServer, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not server.is_running():
            raise PeerStartError(
                f"{server.name} exited with {server.process.returncode} before it was ready; "
                f"log {server.log_path}:\n{tail(server.log_path)}"
            )
        if _is_ready(server):
            return
        time.sleep(POLL_SECONDS)
    raise PeerStartError(
        f"{server.name} not ready after {timeout:.0f}s "
        f"(GET {server.http_url}{server.spec.ready_path}); "
        f"log {server.log_path}:\n{tail(server.log_path)}"
    )


def _is_ready(server: PeerServer) -> bool:
    other_ports = [p for name, p in server.ports.items() if name != HTTP]
    return _http_ok(server.http_url + server.spec.ready_path) and all(
        _accepts(p) for p in other_ports
    )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError as exc:
        exc.close()
        return False
    except (OSError, ValueError):
        return False


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_leftovers(pgid: int, *, grace: float = 5.0) -> None:
    """Children that outlived the group leader get ``grace`` seconds, then SIGKILL."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(POLL_SECONDS)
    _signal_group(pgid, signal.SIGKILL)


def group_rss_bytes(pgid: int) -> int:
    """Sum of RSS over the processes whose process group is ``pgid``."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # fields after "(comm)": state, ppid, pgrp, ...
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # rss in pages
        except (OSError, IndexError, ValueError):
            continue  # the process ended while we looked
    return total
