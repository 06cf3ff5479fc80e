"""Run a Kubernetes API for people: `python -m e2e.cluster [--real]`.

Prints the kubeconfig path (first line of stdout, so scripts can read it) and
serves until Ctrl-C, so `kubectl --kubeconfig <path> ...` works against it.
By default that is the API emulator; `--real` starts a private real control
plane instead (etcd, kube-apiserver, kube-controller-manager from
$KUBEBUILDER_ASSETS or setup-envtest's directory, see e2e/README.md).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from e2e.backends import install_crds
from e2e.emulator import Emulator, EmulatorConfig

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    parser.add_argument("--real", action="store_true", help="a real control plane (envtest)")
    parser.add_argument("--port", type=int, default=0, help="emulator port (default: random)")
    parser.add_argument("--workdir", default=None, help="where to write the kubeconfig")
    parser.add_argument("--history-size", type=int, default=10_000, help="watch history window")
    parser.add_argument("--crds", action="store_true", help="install longrun's CRDs")
    args = parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    start = _start_real if args.real else _start_emulator
    started = start(args)
    if started is None:
        return 2
    kubeconfig, close = started
    print(kubeconfig, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        close()
    return 0


Started = tuple[Path, Callable[[], None]]


def _start_emulator(args: argparse.Namespace) -> Started:
    config = EmulatorConfig(port=args.port, history_size=args.history_size)
    emulator = Emulator(config, workdir=args.workdir).start()
    if args.crds:
        _install_crds(emulator.api_client())
    print(f"Kubernetes API emulator at {emulator.url}; Ctrl-C to stop", file=sys.stderr, flush=True)
    return emulator.kubeconfig_path, emulator.stop


def _start_real(args: argparse.Namespace) -> Started | None:
    from e2e.real import AssetsNotFound, ControlPlane, StartupError, find_assets

    try:
        plane = ControlPlane(find_assets(), workdir=args.workdir).start()
    except (AssetsNotFound, StartupError) as exc:
        print(exc, file=sys.stderr, flush=True)
        return None
    if args.crds:
        _install_crds(plane.api_client())
    took = ", ".join(f"{name} {s:.1f}s" for name, s in plane.timings.start.items())
    controllers = plane.missing_controllers or "kube-controller-manager running"
    print(
        f"real control plane v{plane.assets.version} at {plane.url} ({controllers}; "
        f"started in {took}); Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )

    def close() -> None:
        plane.stop()
        print(f"stopped in {plane.timings.stop['total']:.1f}s", file=sys.stderr, flush=True)

    return plane.kubeconfig_path, close


def _install_crds(api: ApiClient) -> None:
    try:
        install_crds(api)
    finally:
        api.close()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    sys.exit(main())
