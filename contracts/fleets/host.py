"""The InferenceHost resource: one inference daemon outside the cluster, its address and room.

A host is a machine Kubernetes does not run (an Apple Silicon box, a GPU server that is
not a node) serving models over HTTP. Its labels are the object's own `metadata.labels`,
as a node's are, so `kubectl get ihost -l gpu=m2` works and an InferenceModel's
`hostSelector` is an ordinary label selector.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, StringConstraints, model_validator

from contracts.base import SECRET_KEY, Condition, HttpUrl, ObjectName, Schema, cel
from contracts.config import Quantity
from contracts.run import LIST_MAP_BY_TYPE

BUILTIN_ADMIN_PROTOCOLS = ("openai", "ollama", "inferenced")
# A plug-in's protocol is <domain>/<name> (controller entry point group longrun.host_protocols).
ADMIN_PROTOCOL_PATTERN = (
    "^("
    + "|".join(BUILTIN_ADMIN_PROTOCOLS)
    + r"|[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9][-a-z0-9]*)$"
)
# Labels of a Secret that may hold a host's credentials: its owner's consent (docs/security.md).
CREDENTIALS_LABEL = "longrun.dev/host-credentials"
LOCAL_ENDPOINT = (
    "endpoint: loopback, link-local and unspecified addresses are refused (the controller "
    "would call itself, its node or the cloud's metadata service, and an EndpointSlice "
    "cannot hold them); give the host's own address"
)
ENDPOINT_WITH_PATH = (
    "endpoint: give scheme, host and port only: a Service forwards to a port, not to a path"
)
CAPACITY_EMPTY = "set slots, memory or both"
# CEL's view of LOCAL_ENDPOINT: the literal forms (the controller checks every resolved address).
_CEL_LOCAL = (
    "^https?://((localhost|127([.][0-9]+){3}|0[.]0[.]0[.]0|169[.]254([.][0-9]+){2})([:/]|$)|"
    "[^0-9a-zA-Z](::1?[^0-9a-fA-F:]|fe[89abAB][0-9a-fA-F]:))"
)
AdminProtocol = Annotated[
    str, StringConstraints(min_length=1, max_length=253, pattern=ADMIN_PROTOCOL_PATTERN)
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=253)]


def is_local_host(host: str) -> bool:
    """True for `localhost` and IP literals no host may have: loopback, link-local,
    unspecified, multicast (IPv4-mapped IPv6 judged as its IPv4 address)."""
    name = host.strip("[]").split("%", 1)[0].lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
    )


def _endpoint_host(url: str) -> str:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):
        return rest[1:].split("]", 1)[0]
    return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


def _check_endpoint(url: str) -> str:
    tail = url.split("://", 1)[-1]
    if "/" in tail and tail.split("/", 1)[1]:
        raise ValueError(ENDPOINT_WITH_PATH.removeprefix("endpoint: "))
    if "?" in tail or "#" in tail:
        raise ValueError(ENDPOINT_WITH_PATH.removeprefix("endpoint: "))
    if is_local_host(_endpoint_host(url)):
        raise ValueError(LOCAL_ENDPOINT.removeprefix("endpoint: "))
    return url.rstrip("/")


HostEndpoint = Annotated[HttpUrl, AfterValidator(_check_endpoint)]


class HostCapacity(Schema):
    """What a host has room for; each replica placed on it takes its InferenceModel's
    `resources` from it."""

    model_config = ConfigDict(
        json_schema_extra=cel("has(self.slots) || has(self.memory)", CAPACITY_EMPTY)
    )

    slots: int | None = Field(
        default=None, ge=1, le=1024, description="Model replicas the host can serve at once."
    )
    memory: Quantity | None = Field(
        default=None,
        description=(
            "Memory for models, e.g. 64Gi: a replica whose InferenceModel sets "
            "resources.memory takes that much; one that does not cannot be placed here."
        ),
    )

    @model_validator(mode="after")
    def _some(self) -> HostCapacity:
        if self.slots is None and self.memory is None:
            raise ValueError(CAPACITY_EMPTY)
        return self


class HostCredentials(Schema):
    """A key in a Secret of the host's namespace, sent as `Authorization: Bearer` with the
    controller's health checks and admin calls. The Secret must carry the label
    `longrun.dev/host-credentials: "true"`, and the chart must allow the controller to read
    it (`fleets.hostCredentials: true`); docs/security.md says why."""

    name: ObjectName = Field(description="Name of a Secret in the InferenceHost's namespace.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=SECRET_KEY)] = (
        Field(default="token", description="Key inside the Secret's data.")
    )


class InferenceHostSpec(Schema):
    """An inference daemon outside the cluster: where it listens, how it is managed, its room."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            f"!self.endpoint.matches('{_CEL_LOCAL}')",
            LOCAL_ENDPOINT,
            "!self.endpoint.matches('^https?://[^/]+/.')",
            ENDPOINT_WITH_PATH,
        )
    )

    endpoint: HostEndpoint = Field(
        description=(
            "Base URL of the daemon, e.g. http://10.20.0.7:11434 (scheme, host and port; no "
            "path). Runs reach it here through the InferenceModel's Service; the controller "
            "checks its health and calls its admin API here."
        )
    )
    admin_protocol: AdminProtocol = Field(
        default="openai",
        description=(
            "How the controller manages the daemon: openai (GET /v1/models; serves what it "
            "serves, cannot load), ollama (pull, load and unload through Ollama's API), "
            "inferenced (POST /admin/models), or a plug-in's <domain>/<name>."
        ),
    )
    capacity: HostCapacity = Field(
        default_factory=lambda: HostCapacity(slots=1),
        description="Room for replicas: slots, memory or both (default one slot).",
        json_schema_extra={"default": {"slots": 1}},
    )
    credentials: HostCredentials | None = Field(
        default=None, description="Bearer token for the health checks and admin calls."
    )
    unschedulable: bool = Field(
        default=False,
        description="Place no new replica here (replicas already here stay), as kubectl cordon.",
    )


class HostAssignment(Schema):
    """A replica of an InferenceModel that the controller placed on this host."""

    inference_model: ObjectName = Field(description="The InferenceModel.")
    model_name: ShortText = Field(description="The name the host serves the model by.")
    slots: int = Field(default=0, ge=0, le=1024, description="Slots the replica takes.")
    memory: Quantity | None = Field(default=None, description="Memory the replica takes.")
    since: datetime | None = Field(default=None, description="When it was placed here.")


class InferenceHostStatus(Schema):
    """What the controller's health checks saw, and what it placed on the host."""

    ready: bool | None = Field(
        default=None, description="The last health checks passed (a printer column)."
    )
    address: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None,
        description="The IP address the endpoint resolved to and passed the network guard.",
    )
    models: list[ShortText] = Field(
        default_factory=list, max_length=256, description="Models the daemon has loaded."
    )
    models_text: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None, description="The loaded models, comma-separated (a printer column)."
    )
    last_seen: datetime | None = Field(
        default=None, description="When a health check last passed (refreshed once a minute)."
    )
    last_error: Annotated[str, StringConstraints(max_length=1024)] | None = Field(
        default=None, description="Why the last failed health check or admin call failed."
    )
    assignments: list[HostAssignment] = Field(
        default_factory=list,
        max_length=256,
        description="The replicas placed here (the controller's record, for capacity).",
    )
    allocated_slots: int | None = Field(default=None, ge=0, description="Slots taken.")
    allocated_memory: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None, description="Memory taken, e.g. 24Gi."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the status was computed from."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=8,
        description="Ready: the health checks pass.",
        json_schema_extra=LIST_MAP_BY_TYPE,
    )
