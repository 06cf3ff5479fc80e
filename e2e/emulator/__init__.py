"""A Kubernetes API emulator for tests: real HTTP, kube-apiserver semantics, built-in controllers.

See e2e/README.md for usage, fault injection, the node agent that runs pods, and the
list of known divergences from a real kube-apiserver.
"""

from .clock import Clock
from .emulator import Emulator, EmulatorConfig
from .faults import Faults

__all__ = [
    "Clock",
    "Emulator",
    "EmulatorConfig",
    "Faults",
]
