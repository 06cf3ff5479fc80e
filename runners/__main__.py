"""`python -m runners` and the `longrun-runner` console script."""

from __future__ import annotations

import sys

from runners.cli import main as _main


def main() -> None:
    """Console-script entry point: exit with the runner's exit code."""
    sys.exit(_main())


if __name__ == "__main__":
    main()
