"""Everything one reconcile of a namespace's fleet read, as one frozen value.

The observer (controller/reconcile/fleets.py) fills it from the informer caches (hosts,
InferenceModels, the Models they name, the Services and EndpointSlices they own) and from
the host prober (health.py: what each host answered, the admin calls in flight). Deciding
then needs nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.core.fleets.health import HostHealth, OpState, ProtocolInfo
from controller.core.ports import Obj
from controller.core.validation import Problem


@dataclass(frozen=True)
class FleetChildren:
    """The Services (by name) and EndpointSlices the namespace's InferenceModels own."""

    services: Mapping[str, Obj] = field(default_factory=dict)
    slices: Sequence[Obj] = ()


@dataclass(frozen=True)
class FleetObserved:
    """One namespace: its hosts and models, their children, and what the hosts said.

    `health` and `ops` are by host name (ops: by the model name on that host);
    `credential_problems` names hosts whose token could not be read; `answers` are the
    API server's refusals of an InferenceModel's children, by model.
    """

    namespace: str
    hosts: Sequence[Obj] = ()
    models: Sequence[Obj] = ()
    model_sources: Mapping[str, Obj] = field(default_factory=dict)
    children: FleetChildren = field(default_factory=FleetChildren)
    health: Mapping[str, HostHealth] = field(default_factory=dict)
    ops: Mapping[str, Mapping[str, OpState]] = field(default_factory=dict)
    protocols: Mapping[str, ProtocolInfo] = field(default_factory=dict)
    credential_problems: Mapping[str, Problem] = field(default_factory=dict)
    answers: Mapping[str, Problem] = field(default_factory=dict)
