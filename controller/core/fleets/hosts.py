"""A host as the fleet decision sees it: its spec, what the prober saw, what it holds.

`host_view` joins an InferenceHost object with its health (health.py), its admin
protocol's traits and the credential problem the observer found, if any, into one
`HostView`. A host is *ready* (may take replicas, may be in an EndpointSlice as ready)
when its checks pass and nothing refuses it; a host *counts as lost* (its replicas move)
only once it was checked and found not ready: a host the prober has not checked yet (a
controller just started) keeps its replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import urlsplit

from pydantic import ValidationError

from contracts.fleets import HostAssignment, InferenceHostSpec, InferenceHostStatus
from controller.core.fleets.capacity import Room, parse_quantity
from controller.core.fleets.health import HostHealth, HostTarget, ProtocolInfo
from controller.core.ports import Obj
from controller.core.validation import Problem


@dataclass(frozen=True)
class HostView:
    """One InferenceHost, ready to be decided on."""

    obj: Obj
    spec: InferenceHostSpec | None
    health: HostHealth
    protocol: ProtocolInfo | None
    problem: Problem | None
    previous: InferenceHostStatus

    @property
    def name(self) -> str:
        """The host's name."""
        return str(self.obj["metadata"]["name"])

    @property
    def labels(self) -> Mapping[str, str]:
        """The host's labels (what selectors match)."""
        return (self.obj.get("metadata") or {}).get("labels") or {}

    @property
    def is_deleting(self) -> bool:
        """True once the host has a deletionTimestamp."""
        return bool((self.obj.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def is_ready(self) -> bool:
        """True when the host may serve: checked, healthy, nothing refusing it."""
        return self.problem is None and self.health.ready and not self.is_deleting

    @property
    def is_lost(self) -> bool:
        """True when the host's replicas must move: it was checked and is not ready, or it
        is refused or going away."""
        return (
            self.is_deleting
            or self.problem is not None
            or (self.health.checked and not self.health.ready)
        )

    @property
    def can_place(self) -> bool:
        """True when a new replica may go here (ready, not cordoned)."""
        return self.is_ready and self.spec is not None and not self.spec.unschedulable

    @property
    def total(self) -> Room:
        """The host's declared capacity."""
        if self.spec is None:
            return Room(0, None)
        capacity = self.spec.capacity
        return Room(capacity.slots, parse_quantity(capacity.memory))

    @property
    def scheme(self) -> str:
        """http or https: how the host (and so the Service in front of it) is spoken to."""
        return self.spec.endpoint.split("://", 1)[0].lower() if self.spec is not None else ""

    @property
    def port(self) -> int:
        """The endpoint's port (80 or 443 when it names none)."""
        if self.spec is None:
            return 0
        netloc = urlsplit(self.spec.endpoint).netloc
        tail = netloc.rsplit("]", 1)[-1]
        if ":" in tail:
            return int(tail.rsplit(":", 1)[1])
        return 443 if self.scheme == "https" else 80

    def serves(self, model: str) -> bool:
        """True when the host lists `model` among what it serves now."""
        return self.protocol is not None and self.protocol.serves(self.health.models, model)

    def can_serve(self, model: str) -> bool:
        """True when the host serves `model` or can be asked to load it."""
        return self.protocol is not None and (self.protocol.can_load or self.serves(model))


def host_view(
    obj: Obj,
    health: HostHealth | None,
    *,
    protocols: Mapping[str, ProtocolInfo],
    credential_problem: Problem | None = None,
) -> HostView:
    """The view of one host from its object, its health and the known protocols."""
    spec, problem = _spec(obj)
    protocol = protocols.get(spec.admin_protocol) if spec is not None else None
    if problem is None and spec is not None and protocol is None:
        problem = Problem(
            "spec.adminProtocol",
            "ProtocolUnknown",
            f'admin protocol "{spec.admin_protocol}" is not installed in the controller: use '
            f"{', '.join(sorted(protocols))}, or install the plug-in that provides it",
        )
    health = health or HostHealth()
    if problem is None and health.refused:
        problem = Problem("spec.endpoint", health.refused_reason or "Refused", health.refused)
    problem = problem or credential_problem
    return HostView(obj, spec, health, protocol, problem, _previous(obj))


def _spec(obj: Obj) -> tuple[InferenceHostSpec | None, Problem | None]:
    try:
        return InferenceHostSpec.model_validate(obj.get("spec") or {}), None
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"] if not str(p).startswith("function"))
        message = error["msg"].removeprefix("Value error, ")
        return None, Problem(f"spec.{where}".rstrip("."), "InvalidSpec", message)


def _previous(obj: Obj) -> InferenceHostStatus:
    try:
        return InferenceHostStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return InferenceHostStatus()


def taken(assignments: tuple[HostAssignment, ...]) -> tuple[int, Decimal]:
    """Slots and memory the assignments take together."""
    slots = sum(a.slots for a in assignments)
    memory = sum((parse_quantity(a.memory) or Decimal(0) for a in assignments), Decimal(0))
    return slots, memory


def credentials_ref(obj: Obj) -> tuple[str, str] | None:
    """(Secret name, key) of a host's `credentials`, as stored; None without."""
    ref = (obj.get("spec") or {}).get("credentials")
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    return str(ref["name"]), str(ref.get("key") or "token")


def target_of(obj: Obj, *, token: str | None = None) -> HostTarget | None:
    """What the prober checks of a host; None for one with an unusable spec or going away."""
    spec, problem = _spec(obj)
    meta = obj.get("metadata") or {}
    if spec is None or problem is not None or meta.get("deletionTimestamp"):
        return None
    return HostTarget(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        endpoint=spec.endpoint,
        protocol=spec.admin_protocol,
        token=token,
    )
