"""The model catalog: aliases a ModelDeployment may name instead of a Model (issue 31).

A catalog is one YAML document in a ConfigMap (key `catalog.yaml`; the chart installs a
starter one and may refresh it from a URL). Each entry has an alias, a task, a size and its
variants by compute (cpu, gpu), each variant a source and a format, given once on the entry
when they are the same. A deployment says `model: {catalog: {name: <alias>}}`; the
controller then serves the Model of that name in the deployment's namespace, and creates it
from the entry when there is none (lazy registration). Entries name public sources only: a
catalog is shared by every namespace, and a Secret belongs to one.

Every variant must make a valid Model spec: the same rules, the same words, prefixed with
the entry and the field (`models[2] "qwen": variants.gpu.source: ...`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from contracts.base import DNS_SUBDOMAIN, Schema, cel
from contracts.config import Quantity
from contracts.serving.model import (
    MODEL_RULES,
    FilePattern,
    ModelFields,
    ModelSpec,
    SourceUri,
)
from contracts.serving.sources import RUNTIME_FORMATS, ModelFormat, Sha256, Task

Compute = Literal["cpu", "gpu"]
# An alias is the name of the Model made from it, and a label value on that Model.
CatalogAlias = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN)]
COMPUTES: tuple[Compute, ...] = ("cpu", "gpu")
CATALOG_KEY = "catalog.yaml"  # the ConfigMap's data key
# The fields an entry gives to each of its variants, and a variant may set for itself.
_MODEL_KEYS = ("source", "format", "sha256", "include", "exclude")
NOT_WITH_CATALOG = (
    "catalog: names a catalog entry, which gives the source, format and task; set no other "
    "model field beside it (or leave catalog out and define the model here)"
)
CATALOG_OR_SOURCE = "set exactly one of catalog and source"
FORMAT_WITH_SOURCE = "format: required with source"
_MODEL_FIELDS = ("format", "task", "sha256", "credentials", "endpointUrl", "include", "exclude")
_PY_FIELDS = {"format", "task", "sha256", "credentials", "endpoint_url", "include", "exclude"}


def _inline_only(rules: tuple[str, ...]) -> tuple[str, ...]:
    """A Model's CEL rules, holding only where the model is defined here: with a source and
    a format (a missing one is refused by the rules above, not reported as an evaluation
    error of every rule that reads it)."""
    pairs = zip(rules[::2], rules[1::2], strict=True)
    guard = "!has(self.source) || !has(self.format) || "
    return tuple(x for rule, msg in pairs for x in (f"{guard}({rule})", msg))


class CatalogChoice(Schema):
    """Which catalog entry a deployment serves, and which of its variants."""

    name: CatalogAlias = Field(
        description=(
            "The entry's alias (`longrun catalog list`). The deployment serves the Model of "
            "this name in its own namespace, made from the entry when there is none."
        )
    )
    compute: Compute | None = Field(
        default=None,
        description=(
            "cpu or gpu: the variant to create the Model from. Default: among the variants "
            "whose format the runtime serves, gpu for a deployment with resources.gpu and "
            "cpu for one without, else the other."
        ),
    )


class DeploymentModel(ModelFields):
    """A deployment's own model: defined here (source, format, ...) or named from the
    catalog (`catalog`), one or the other."""

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.catalog) != has(self.source)",
            CATALOG_OR_SOURCE,
            "has(self.catalog) || has(self.format)",
            FORMAT_WITH_SOURCE,
            "!has(self.catalog) || !("
            + " || ".join(f"has(self.{key})" for key in _MODEL_FIELDS)
            + ")",
            NOT_WITH_CATALOG,
            *_inline_only(MODEL_RULES),
        )
    )

    catalog: CatalogChoice | None = Field(
        default=None, description="A catalog entry to serve, in place of source and format."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> DeploymentModel:
        if (self.catalog is None) == (self.source is None):
            raise ValueError(CATALOG_OR_SOURCE)
        if self.catalog is not None:
            if self.model_fields_set & _PY_FIELDS:
                raise ValueError(NOT_WITH_CATALOG)
            return self
        if self.format is None:
            raise ValueError(FORMAT_WITH_SOURCE)
        try:
            ModelSpec.model_validate(self.model_dump(exclude={"catalog"}, exclude_unset=True))
        except ValidationError as exc:
            raise ValueError(_first(exc)) from None
        return self

    def inline(self) -> ModelSpec | None:
        """The model defined here, or None when it names a catalog entry."""
        if self.catalog is not None:
            return None
        return ModelSpec.model_validate(self.model_dump(exclude={"catalog"}, exclude_unset=True))


def _first(exc: ValidationError) -> str:
    """`field.path: message` of a validation error's first entry."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


# -- the catalog document ---------------------------------------------------------------------

Description = Annotated[str, StringConstraints(max_length=1024)]


class CatalogVariant(Schema):
    """One variant of an entry: what differs from the entry for this compute (often nothing)."""

    source: SourceUri | None = None
    format: ModelFormat | None = None
    sha256: Sha256 | None = None
    include: list[FilePattern] | None = Field(default=None, max_length=64)
    exclude: list[FilePattern] | None = Field(default=None, max_length=64)
    size: Quantity | None = None


class CatalogEntry(Schema):
    """A catalog entry: an alias, what the model does, and its variants by compute."""

    name: CatalogAlias
    description: Description | None = None
    task: Task | None = None
    size: Quantity | None = None
    source: SourceUri | None = None
    format: ModelFormat | None = None
    sha256: Sha256 | None = None
    include: list[FilePattern] | None = Field(default=None, max_length=64)
    exclude: list[FilePattern] | None = Field(default=None, max_length=64)
    variants: dict[Compute, CatalogVariant] = Field(min_length=1)

    @field_validator("variants", mode="before")
    @classmethod
    def _empty_variants(cls, value: object) -> object:
        # `cpu:` with nothing under it is a variant that changes nothing.
        if isinstance(value, dict):
            return {key: {} if item is None else item for key, item in value.items()}
        return value

    @model_validator(mode="after")
    def _variants_are_models(self) -> CatalogEntry:
        for compute in self.variants:
            try:
                self.model_spec(compute)
            except ValidationError as exc:
                raise ValueError(f"variants.{compute}: {_first(exc)}") from None
        return self

    def model_spec(self, compute: Compute) -> ModelSpec:
        """The Model spec of one variant: the entry's fields, with the variant's on top."""
        variant = self.variants[compute]
        fields: dict[str, Any] = {key: getattr(self, key) for key in _MODEL_KEYS}
        fields.update({key: getattr(variant, key) for key in variant.model_fields_set})
        fields.pop("size", None)
        fields["task"] = self.task
        return ModelSpec.model_validate({k: v for k, v in fields.items() if v is not None})

    def size_of(self, compute: Compute) -> str | None:
        """The download size of a variant, as a quantity (its own, else the entry's)."""
        size = self.variants[compute].size or self.size
        return str(size) if size is not None else None

    def pick(self, asked: Compute | None, *, gpus: int, runtime: str) -> Compute | None:
        """The variant a deployment gets: the one asked for (None when the entry lacks it);
        else, among the variants whose format the runtime serves (all if none does), gpu
        for a deployment with GPUs and cpu for one without, or the other one."""
        if asked is not None:
            return asked if asked in self.variants else None
        formats = RUNTIME_FORMATS.get(runtime)
        fits = [
            compute
            for compute in self.variants
            if formats is None or self.model_spec(compute).format in formats
        ] or list(self.variants)
        order: tuple[Compute, ...] = ("gpu", "cpu") if gpus else ("cpu", "gpu")
        return next(compute for compute in order if compute in fits)


class Catalog(Schema):
    """The `catalog.yaml` document: a list of entries with distinct aliases."""

    models: list[CatalogEntry] = Field(default_factory=list, max_length=10_000)

    @model_validator(mode="after")
    def _distinct(self) -> Catalog:
        seen: set[str] = set()
        for entry in self.models:
            if entry.name in seen:
                raise ValueError(f'models: the alias "{entry.name}" is listed twice')
            seen.add(entry.name)
        return self

    def get(self, name: str) -> CatalogEntry | None:
        """The entry of this alias, if any."""
        return next((entry for entry in self.models if entry.name == name), None)


class CatalogError(ValueError):
    """A catalog document that is not valid, with one line saying where and why."""


def parse_catalog(document: object) -> Catalog:
    """A catalog from its parsed YAML; CatalogError naming the entry and field otherwise."""
    if not isinstance(document, dict):
        raise CatalogError("the catalog is not a mapping: write `models:` and a list of entries")
    try:
        return Catalog.model_validate(document)
    except ValidationError as exc:
        raise CatalogError(_catalog_error(exc, document)) from None


def _catalog_error(exc: ValidationError, document: dict[str, Any]) -> str:
    err = exc.errors()[0]
    loc = list(err.get("loc", ()))
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int):
        entries = document.get("models")
        entry = entries[loc[1]] if isinstance(entries, list) else None
        alias = entry.get("name") if isinstance(entry, dict) else None
        where = f"models[{loc[1]}]" + (f' "{alias}"' if isinstance(alias, str) else "")
        field = ".".join(str(p) for p in loc[2:])
        return f"{where}: {field}: {msg}" if field else f"{where}: {msg}"
    field = ".".join(str(p) for p in loc)
    return f"{field}: {msg}" if field else msg
