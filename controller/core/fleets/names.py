"""Names, labels and work-queue keys of the fleet kinds and of what an InferenceModel owns.

One work-queue key per namespace (`Fleet/<namespace>`): placing replicas is a decision
over every host and model of a namespace at once (a host's free capacity is what the other
models left), so one reconcile makes it, and the queue never runs two for one namespace.
The Service is named after the InferenceModel, as inferenced-operator names it, so pods
reach `<model>.<namespace>.svc:<port>`.
"""

from __future__ import annotations

from controller.core.names import GROUP_DOMAIN, MANAGED_BY, MANAGER, fit, short_hash

MODEL_LABEL = f"{GROUP_DOMAIN}/inference-model"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER = "fleets.longrun.dev"
PORT_NAME = "http"
SERVICE_NAME_MAX = 63  # a DNS label
NAME_MAX = 253
LABEL_MAX = 63
FLEET_KEY_PREFIX = "Fleet/"


def fleet_key(namespace: str) -> str:
    """The work-queue key of a namespace's hosts and models."""
    return f"{FLEET_KEY_PREFIX}{namespace}"


def split_fleet_key(key: str) -> str | None:
    """The namespace of a fleet work-queue key; None for any other key."""
    return key.removeprefix(FLEET_KEY_PREFIX) if key.startswith(FLEET_KEY_PREFIX) else None


def service_name(model: str) -> str:
    """The Service of an InferenceModel: its own name (cut to a DNS label)."""
    return fit(model, SERVICE_NAME_MAX)


def slice_name(model: str, family: str, port: int) -> str:
    """The EndpointSlice of an InferenceModel's hosts of one address family and port."""
    name = f"{service_name(model)}-{family.lower()}-{port}"
    return name if len(name) <= NAME_MAX else f"{model[:200]}-{short_hash(name)}"


def label_value(model: str) -> str:
    """The `longrun.dev/inference-model` label value (at most 63 characters)."""
    return fit(model, LABEL_MAX)


def labels(model: str) -> dict[str, str]:
    """Labels of every object an InferenceModel owns (the informers select on them)."""
    return {MANAGED_BY: MANAGER, MODEL_LABEL: label_value(model)}
