"""A Kubernetes API emulator for tests: real HTTP, kube-apiserver semantics, built-in controllers.

See e2e/README.md for usage, the pod-executor interface, fault injection and the
list of known divergences from a real kube-apiserver.
"""

from .clock import Clock
from .emulator import Emulator, EmulatorConfig
from .executors import PodExecutor, PodHandle, ScriptedExecutor
from .faults import Faults

__all__ = [
    "Clock",
    "Emulator",
    "EmulatorConfig",
    "Faults",
    "PodExecutor",
    "PodHandle",
    "ScriptedExecutor",
]
