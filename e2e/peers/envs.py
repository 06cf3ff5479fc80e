"""One cached virtualenv per model server, built once and reused.

Why: the servers pin numpy, protobuf, grpcio, fastapi and uvloop differently from each other and
from the project, and llama.cpp compiles from source for ~11 minutes. So each server env lives in
a cache directory keyed by a hash of its pins (and the Python version), and every later run reuses
it. The rules the code relies on:

- A ready env is a directory with a marker file; nothing else counts as ready.
- Builds happen in a temporary sibling directory that is renamed into place only when complete, so
  an interrupted build never looks ready. Stale temporary directories are removed on the next try.
- A per-key lock file serialises builders; a process that waited finds the marker and reuses.
- Slow source builds (``EnvSpec.wheels``) go through a separate wheel cache, built under their own
  lock, so an env rebuild never recompiles them.
- Interpreters are always run as ``<env>/bin/python -m ...`` because console-script shebangs
  keep the temporary path after the rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e.peers.specs import ENVS, EnvSpec

CACHE_ENV_VAR = "LONGRUN_PEERS_CACHE"
MARKER = ".longrun-ready.json"
# Bump when the layout of a built env changes, so old caches are not reused.
FORMAT_VERSION = "1"

Progress = Callable[[str], None]


class EnvBuildError(RuntimeError):
    """A server env or wheel could not be built; the message ends with the build log tail."""


@dataclass(frozen=True)
class PreparedEnv:
    """A ready virtualenv: where it is, its interpreter and the interpreter's LIBDIR."""

    name: str
    path: Path
    libdir: str
    built_now: bool
    seconds: float

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory: ``override``, else ``$LONGRUN_PEERS_CACHE``, else ~/.cache/..."""
    raw = override or os.environ.get(CACHE_ENV_VAR)
    root = Path(raw) if raw else Path.home() / ".cache" / "longrun" / "peers"
    return root.expanduser()


def env_key(spec: EnvSpec) -> str:
    """``<name>-<hash>``: the hash covers the pins, the Python version and the layout version."""
    payload = {
        "format": FORMAT_VERSION,
        "requirements": sorted(spec.requirements),
        "wheels": sorted(spec.wheels),
        **_finishing(spec),
        "python": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
        "machine": platform.machine(),
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return f"{spec.name}-{digest[:12]}"


def _finishing(spec: EnvSpec) -> dict[str, object]:
    """The cache key's part for what runs after pip: removals, and the setup script's text."""
    if not spec.remove and spec.setup_path is None:
        return {}  # envs without them keep the keys (and caches) they had
    setup = spec.setup_path.read_bytes() if spec.setup_path is not None else b""
    return {"remove": sorted(spec.remove), "setup": hashlib.sha256(setup).hexdigest()}


def env_path(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the env called ``name`` lives (whether or not it is built)."""
    return cache_root(cache_dir) / env_key(ENVS[name])


def is_ready(path: Path) -> bool:
    return (path / MARKER).is_file()


def ensure_env(
    name: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> PreparedEnv:
    """Return the ready env ``name``, building it first if needed (safe to call concurrently)."""
    say = progress or (lambda _msg: None)
    spec = ENVS[name]
    root = cache_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / env_key(spec)
    started = time.monotonic()
    if not is_ready(final):
        with _locked(root / f"{final.name}.lock", say=say):
            if not is_ready(final):
                wheel_dir = _ensure_wheels(spec, root=root, say=say)
                _build_env(spec, final=final, wheel_dir=wheel_dir, say=say)
                return _load(final, name=name, built_now=True, started=started)
    return _load(final, name=name, built_now=False, started=started)


def _load(path: Path, *, name: str, built_now: bool, started: float) -> PreparedEnv:
    marker = json.loads((path / MARKER).read_text())
    seconds = time.monotonic() - started
    return PreparedEnv(name, path, marker["libdir"], built_now, seconds)


@contextlib.contextmanager
def _locked(lock_path: Path, *, say: Progress) -> Iterator[None]:
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"waiting for another process building {lock_path.stem}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_env(spec: EnvSpec, *, final: Path, wheel_dir: Path | None, say: Progress) -> None:
    """Build into a temp dir next to ``final``, write the marker, rename into place."""
    _remove_stale(final.parent, prefix=f".tmp-{final.name}-")
    if final.exists():  # a half-built env from an older layout: never trust it
        shutil.rmtree(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    log = _log_path(final.parent, f"{final.name}.build.log")
    started = time.monotonic()
    try:
        say(f"{spec.name}: creating virtualenv (log: {log})")
        _run([sys.executable, "-m", "venv", str(tmp)], log=log)
        say(f"{spec.name}: installing {' '.join(spec.requirements)}")
        _pip_install(spec, python=tmp / "bin" / "python", wheel_dir=wheel_dir, log=log)
        _finish(spec, env=tmp, log=log, say=say)
        _write_marker(spec, tmp=tmp, seconds=time.monotonic() - started)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"{spec.name}: ready in {time.monotonic() - started:.0f}s at {final}")


def _pip_install(spec: EnvSpec, *, python: Path, wheel_dir: Path | None, log: Path) -> None:
    cmd = [
        str(python),
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
    ]
    if wheel_dir is not None:
        # The cached wheels must be used, never a fresh source build.
        binaries = ",".join(_wheel_project(req) for req in spec.wheels)
        cmd += ["--find-links", str(wheel_dir), "--only-binary", binaries]
    _run([*cmd, *spec.requirements], log=log)


def _finish(spec: EnvSpec, *, env: Path, log: Path, say: Progress) -> None:
    """Uninstall `spec.remove`, then run `spec.setup` in the env (see EnvSpec)."""
    python = str(env / "bin" / "python")
    if spec.remove:
        say(f"{spec.name}: removing {' '.join(spec.remove)}")
        quiet = ["--no-input", "--disable-pip-version-check"]
        _run([python, "-m", "pip", "uninstall", "-y", *quiet, *spec.remove], log=log)
    if spec.setup_path is not None:
        say(f"{spec.name}: running {spec.setup}")
        _run([python, str(spec.setup_path), str(env)], log=log)


def _write_marker(spec: EnvSpec, *, tmp: Path, seconds: float) -> None:
    probe = "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"
    libdir = subprocess.run(
        [str(tmp / "bin" / "python"), "-c", probe],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    marker = {
        "name": spec.name,
        "requirements": list(spec.requirements),
        "python": sys.version.split()[0],
        "libdir": libdir,
        "build_seconds": round(seconds, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _ensure_wheels(spec: EnvSpec, *, root: Path, say: Progress) -> Path | None:
    """Build each of ``spec.wheels`` once into ``<root>/wheels``; return that dir."""
    if not spec.wheels:
        return None
    wheel_dir = root / "wheels"
    wheel_dir.mkdir(exist_ok=True)
    for req in spec.wheels:
        if _find_wheel(wheel_dir, req) is None:
            with _locked(root / "wheels.lock", say=say):
                if _find_wheel(wheel_dir, req) is None:
                    _build_wheel(req, wheel_dir=wheel_dir, say=say)
    return wheel_dir


def _build_wheel(req: str, *, wheel_dir: Path, say: Progress) -> None:
    _remove_stale(wheel_dir, prefix=".build-")
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=wheel_dir))
    log = _log_path(wheel_dir.parent, f"wheel-{_wheel_project(req)}.build.log")
    started = time.monotonic()
    say(f"building wheel {req} (llama.cpp takes ~11 min on 2 cores); log: {log}")
    try:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-input",
            "-w",
            str(tmp),
        ]
        _run([*cmd, req], log=log, env={"CMAKE_BUILD_PARALLEL_LEVEL": "2"})
        for wheel in tmp.glob("*.whl"):
            wheel.rename(wheel_dir / wheel.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if _find_wheel(wheel_dir, req) is None:
        raise EnvBuildError(f"pip wheel {req} produced no matching wheel in {wheel_dir}")
    say(f"built wheel {req} in {time.monotonic() - started:.0f}s")


def _wheel_project(req: str) -> str:
    return req.split("[")[0].split("==")[0].strip()


def _find_wheel(wheel_dir: Path, req: str) -> Path | None:
    project = _wheel_project(req).replace("-", "_").lower()
    version = req.split("==")[1].strip() if "==" in req else "*"
    return next(iter(sorted(wheel_dir.glob(f"{project}-{version}-*.whl"))), None)


def _remove_stale(parent: Path, *, prefix: str) -> None:
    """Delete leftovers of interrupted builds; callers hold the lock, so none is in progress."""
    for stale in parent.glob(f"{prefix}*"):
        shutil.rmtree(stale, ignore_errors=True)


def _log_path(root: Path, name: str) -> Path:
    """Build logs live outside the temp dirs so a failed build's log survives its cleanup."""
    (root / "logs").mkdir(exist_ok=True)
    log = root / "logs" / name
    log.write_text("")  # one build per log
    return log


def _run(cmd: list[str], *, log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(
            cmd,
            check=False,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    if proc.returncode != 0:
        what = " ".join(Path(c).name for c in cmd[:4])
        raise EnvBuildError(f"{what} ... failed (exit {proc.returncode}), log {log}:\n{tail(log)}")


def tail(path: Path, *, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note that it is missing."""
    try:
        with path.open(errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError as exc:
        return f"(no log at {path}: {exc})"
