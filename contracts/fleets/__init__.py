"""InferenceHost and InferenceModel: models served by hosts outside the cluster (issue 31).

An `InferenceHost` (`ihost`) is one inference daemon the cluster does not run (an Apple
Silicon machine, a GPU box that is not a node): its endpoint, labels, capacity, admin
protocol and optional credentials. An `InferenceModel` (`imodel`) is a model such hosts
should serve: a host selector, a replica count, the model. The controller health-checks the
hosts, places replicas by free capacity, asks the hosts to load the model, and publishes a
selector-less Service and an EndpointSlice so pods reach the fleet at one name.

As everywhere in `contracts`, these models are the source of the CRDs, the docs and
`longrun validate`; every `cel(...)` rule mirrors a validator next to it.
"""

from contracts.fleets.host import (
    ADMIN_PROTOCOL_PATTERN,
    BUILTIN_ADMIN_PROTOCOLS,
    CREDENTIALS_LABEL,
    HostAssignment,
    HostCapacity,
    HostCredentials,
    InferenceHostSpec,
    InferenceHostStatus,
    is_local_host,
)
from contracts.fleets.kinds import (
    FLEET_KINDS,
    FLEET_RESOURCE_MODELS,
    INFERENCE_HOST_KIND,
    INFERENCE_MODEL_KIND,
    InferenceHost,
    InferenceModel,
)
from contracts.fleets.model import (
    FleetPhase,
    FleetProtocol,
    HostSelector,
    InferenceModelSpec,
    InferenceModelStatus,
    LabelSelectorRequirement,
    Placement,
    PlacementState,
    ReplicaResources,
)

__all__ = [
    "ADMIN_PROTOCOL_PATTERN",
    "BUILTIN_ADMIN_PROTOCOLS",
    "CREDENTIALS_LABEL",
    "FLEET_KINDS",
    "FLEET_RESOURCE_MODELS",
    "INFERENCE_HOST_KIND",
    "INFERENCE_MODEL_KIND",
    "FleetPhase",
    "FleetProtocol",
    "HostAssignment",
    "HostCapacity",
    "HostCredentials",
    "HostSelector",
    "InferenceHost",
    "InferenceHostSpec",
    "InferenceHostStatus",
    "InferenceModel",
    "InferenceModelSpec",
    "InferenceModelStatus",
    "LabelSelectorRequirement",
    "Placement",
    "PlacementState",
    "ReplicaResources",
    "is_local_host",
]
