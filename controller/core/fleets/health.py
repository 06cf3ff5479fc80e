"""What the controller learns from the hosts themselves, as plain data the core decides on.

The prober (controller/hosts/prober.py) health-checks every host on an interval and runs
the admin calls (load, unload); the fleet reconciler reads what it saw through the
`HostAgent` port (ports.py) as these values. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

OpKind = Literal["load", "unload"]
OpPhase = Literal["running", "done", "failed"]


@dataclass(frozen=True)
class HostTarget:
    """What the prober needs to check a host: where, how, and with which token."""

    namespace: str
    name: str
    endpoint: str
    protocol: str
    token: str | None = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class HostHealth:
    """The outcome of a host's recent health checks.

    `ready` turns False once `failures` reach the failure threshold (one failed check is
    not yet a dead host). `refused` is a problem no retry fixes (the address is not
    allowed, the protocol unknown): the host is never ready until its spec changes.
    """

    checked: bool = False
    ready: bool = False
    address: str | None = None
    port: int | None = None
    models: tuple[str, ...] = ()
    last_error: str | None = None
    last_seen: datetime | None = None
    failures: int = 0
    refused: str | None = None
    refused_reason: str = ""


@dataclass(frozen=True)
class OpState:
    """The last admin call of one kind for one model on one host."""

    kind: OpKind
    phase: OpPhase
    message: str = ""
    at: datetime | None = None


@dataclass(frozen=True)
class ProtocolInfo:
    """What the core needs of an admin protocol: can it load, and how it names models."""

    name: str
    can_load: bool
    normalize: Callable[[str], str] = lambda name: name

    def serves(self, listed: tuple[str, ...], model: str) -> bool:
        """True when a host listing `listed` serves `model` (names compared as the protocol
        compares them: Ollama's `llama3` is `llama3:latest`)."""
        wanted = self.normalize(model)
        return any(self.normalize(name) == wanted for name in listed)
