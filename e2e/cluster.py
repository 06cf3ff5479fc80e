"""Run the Kubernetes API emulator for people: `python -m e2e.cluster`.

Prints the kubeconfig path (first line of stdout, so scripts can read it) and
serves until Ctrl-C, so `kubectl --kubeconfig <path> ...` works against it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from e2e.emulator import Emulator, EmulatorConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: random)")
    parser.add_argument("--workdir", default=None, help="where to write the kubeconfig")
    parser.add_argument("--history-size", type=int, default=10_000, help="watch history window")
    args = parser.parse_args(argv)
    config = EmulatorConfig(port=args.port, history_size=args.history_size)
    emulator = Emulator(config, workdir=args.workdir).start()
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(emulator.kubeconfig_path, flush=True)
    print(f"Kubernetes API emulator at {emulator.url}; Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
