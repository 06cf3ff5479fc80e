"""Shared building blocks for every longrun schema.

The pydantic models in this package are the single source of truth: the CRDs,
the runner contract's JSON Schema and the CLI's offline validation are all
generated from them. Python attributes are snake_case; the wire format (YAML,
JSON, the Kubernetes API) is camelCase, as Kubernetes users expect.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

# RFC 1123 names as Kubernetes validates them for Secrets, ConfigMaps and most objects.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Keys of a Secret's data map.
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"

ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]


def url_pattern(*schemes: str, optional: bool) -> str:
    """The CRD pattern of an endpoint URL: a scheme of `schemes` (`optional` or not), a host
    (name, IPv4 or [IPv6]) with an optional port and path, and no credentials (no `user@`)."""
    scheme = f"(?:(?:{'|'.join(schemes)})://)" + ("?" if optional else "")
    return (
        rf"^{scheme}(?:\[[0-9A-Fa-f:.]+\]|[^\s/@:\[\]?#]+)(?::[0-9]{{1,5}})?"
        r"(?:[/?#]\S*)?$"
    )


def checked_url(value: str, *, schemes: tuple[str, ...], optional: bool) -> str:
    """`value` when it is a URL of one of `schemes` (or, if `optional`, has no scheme) without
    credentials; else a ValueError saying what is wrong and what to do instead."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "", value
    allowed = ", ".join(f"{s}://" for s in schemes)
    if scheme and scheme.lower() not in schemes:
        raise ValueError(f"URL scheme {scheme}:// is not allowed: use {allowed}")
    if not scheme and not optional:
        raise ValueError(f"{value!r} has no scheme: start it with {allowed}")
    host = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in host:
        raise ValueError(
            "the URL must not contain credentials (user:password@): put them in a Secret and "
            "reference it (auth.secretRef, credentials, or a urlSecretRef)"
        )
    if not host or any(c.isspace() for c in value):
        raise ValueError(f"{value!r} is not a URL (expected e.g. http://host:8080/path)")
    return value


HTTP_SCHEMES = ("http", "https")
MODEL_SCHEMES = ("http", "https", "grpc", "grpcs")
HttpUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048),
    AfterValidator(lambda v: checked_url(v, schemes=HTTP_SCHEMES, optional=False)),
    Field(json_schema_extra={"pattern": url_pattern(*HTTP_SCHEMES, optional=False)}),
]
ModelUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048),
    AfterValidator(lambda v: checked_url(v, schemes=MODEL_SCHEMES, optional=True)),
    Field(json_schema_extra={"pattern": url_pattern(*MODEL_SCHEMES, optional=True)}),
]
NamespaceName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_LABEL)]


def cel(*rule_message: str) -> JsonDict:
    """CEL rules for the CRD (`x-kubernetes-validations`), given as rule, message pairs.

    They mirror the pydantic validators next to them so the API server rejects the
    same mistakes early, with the same words.
    """
    pairs = zip(rule_message[::2], rule_message[1::2], strict=True)
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in pairs]}


class Schema(BaseModel):
    """Base for user-authored schemas: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=False,
    )

    def to_wire(self) -> dict[str, object]:
        """Serialize as it appears in YAML/JSON: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class SecretReference(Schema):
    """Base of every model that names a Secret: the marker the controller looks for.

    Wherever a spec holds one (a built-in block or a plug-in's storage settings), the
    controller mounts the Secret into the runner pod at `<secretsDir>/<name>/` and refuses
    one in another namespace. So a new credential type only derives from this class; the
    controller never lists them. Values never appear in specs, contracts or ConfigMaps.
    """

    name: ObjectName = Field(description="Name of a Secret in the InferenceRun's namespace.")

    def secret_namespace(self) -> str | None:
        """The namespace the reference names, or None for the run's own."""
        return None


class SecretKeyRef(SecretReference):
    """Where a credential lives. Values never appear in specs, contracts or ConfigMaps."""

    key: Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=SECRET_KEY)] = (
        Field(description="Key inside the Secret's data.")
    )


class LocalObjectReference(Schema):
    """A reference by name to an object in the same namespace."""

    name: ObjectName = Field(description="Name of the referenced object.")


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(Schema):
    """A Kubernetes-style condition (apimachinery metav1.Condition)."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)] = Field(
        description="Condition type in CamelCase, e.g. Accepted, Running, Complete, Failed."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Annotated[str, StringConstraints(max_length=1024)] = Field(
        default="",
        description="CamelCase, machine-readable reason for the last transition.",
    )
    message: Annotated[str, StringConstraints(max_length=32768)] = Field(
        default="", description="Human-readable details about the last transition."
    )
    last_transition_time: datetime | None = Field(
        default=None,
        description="When status last changed (not when reason/message changed).",
    )
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        description="metadata.generation the condition was computed from.",
    )
