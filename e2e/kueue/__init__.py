"""Kueue's manager run out of cluster against a real control plane, for tests (e2e/README.md).

Found through `KUEUE_ASSETS` (assets.py); where it is absent, tests skip with one line naming
the variable, also in CI (like `KUBEBUILDER_ASSETS`: no registry we install from carries it).
"""

from .assets import ENV_VAR, SKIP_PREFIX, KueueAssets, KueueNotFound, find_kueue
from .manager import KueueManager, KueueOptions

__all__ = [
    "ENV_VAR",
    "SKIP_PREFIX",
    "KueueAssets",
    "KueueManager",
    "KueueNotFound",
    "KueueOptions",
    "find_kueue",
]
