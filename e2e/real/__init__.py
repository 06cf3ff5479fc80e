"""A real Kubernetes control plane for tests, envtest style (see e2e/README.md)."""

from .assets import ENV_VAR, Assets, AssetsNotFound, find_assets
from .controlplane import ControlPlane, ControlPlaneOptions
from .handle import RealClusterHandle
from .processes import StartupError

__all__ = [
    "ENV_VAR",
    "Assets",
    "AssetsNotFound",
    "ControlPlane",
    "ControlPlaneOptions",
    "RealClusterHandle",
    "StartupError",
    "find_assets",
]
