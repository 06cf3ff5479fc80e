"""Lazy registration: the Model a deployment names from the catalog, made from its entry.

A deployment with `model: {catalog: {name: <alias>}}` serves the Model `<alias>` of its own
namespace, like a `modelRef` without a namespace. When that Model is missing, the reconciler
(controller/reconcile/catalog.py) reads the catalog ConfigMap and asks `registration` what to
do: create this Model, or report this problem. The Model is not owned by the deployment: it
is the namespace's, shared by every deployment that names the alias, and stays when they go.
It is labelled and annotated with the entry and variant it came from.

Each refusal says what to do: create the Model by hand, fix the catalog, turn lazy
registration on (chart `catalog.lazyRegistration`), or pick another compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.serving import (
    CatalogError,
    Compute,
    ModelDeploymentSpec,
    parse_catalog,
)
from controller.core.names import GROUP_DOMAIN, MANAGED_BY, MANAGER
from controller.core.ports import Obj
from controller.core.validation import Problem

ENTRY_LABEL = f"{GROUP_DOMAIN}/catalog-entry"
COMPUTE_ANNOTATION = f"{GROUP_DOMAIN}/catalog-compute"
CREATED_FOR_ANNOTATION = f"{GROUP_DOMAIN}/created-for"
FIELD = "spec.model.catalog"


@dataclass(frozen=True)
class CatalogSettings:
    """Where the catalog is (`namespace/name` of its ConfigMap; "" for none: SERVING_CATALOG)
    and whether a missing Model is made from it (SERVING_CATALOG_LAZY)."""

    config_map: str = ""
    lazy: bool = True


@dataclass(frozen=True)
class Registration:
    """A Model to create from the catalog, and the Event that says so."""

    model: Obj
    message: str


def catalog_choice(spec: ModelDeploymentSpec) -> tuple[str, Compute | None] | None:
    """The alias and compute a deployment names from the catalog, if it does."""
    choice = spec.model.catalog if spec.model is not None else None
    return (choice.name, choice.compute) if choice is not None else None


def model_of(deployment: Obj) -> str | None:
    """The `namespace/name` of the Model a deployment serves by name: its modelRef's, or
    the one named after its catalog entry (in its own namespace); read from the raw object,
    as stored."""
    spec = deployment.get("spec") or {}
    model = spec.get("model")
    catalog = model.get("catalog") if isinstance(model, dict) else None
    ref = spec.get("modelRef") or catalog
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    own = (deployment.get("metadata") or {}).get("namespace", "")
    namespace = (ref.get("namespace") if ref is not catalog else None) or own
    return f"{namespace}/{ref['name']}"


def not_registered(alias: str, namespace: str, settings: CatalogSettings) -> Problem | None:
    """Why a missing Model is not made from the catalog (None: it may be)."""
    if not settings.config_map:
        return Problem(
            FIELD,
            "CatalogNotConfigured",
            f'Model "{alias}" does not exist in namespace "{namespace}" and no model catalog '
            f"is configured (chart catalog.enabled): create the Model, or install the catalog",
        )
    if not settings.lazy:
        return Problem(
            FIELD,
            "LazyRegistrationOff",
            f'Model "{alias}" does not exist in namespace "{namespace}", and lazy registration '
            f"from the catalog is off: create the Model (`longrun catalog list` shows the "
            f"entry's source and format), or enable catalog.lazyRegistration in the chart",
        )
    return None


def catalog_invalid(settings: CatalogSettings, reason: str) -> Problem:
    """The catalog ConfigMap holds no readable catalog."""
    return Problem(
        FIELD,
        "CatalogInvalid",
        f'the model catalog (ConfigMap "{settings.config_map}") is invalid: {reason}; fix it',
    )


def registration(
    document: object | None,
    *,
    obj: Obj,
    spec: ModelDeploymentSpec,
    settings: CatalogSettings,
) -> Registration | Problem:
    """The Model to create for a deployment that names a catalog entry (the parsed
    catalog.yaml, None when the ConfigMap or its key is missing), or the problem."""
    choice = catalog_choice(spec)
    assert choice is not None
    alias, asked = choice
    where = f'the model catalog (ConfigMap "{settings.config_map}")'
    if document is None:
        return Problem(
            FIELD,
            "CatalogMissing",
            f"{where} does not exist or has no catalog.yaml: reinstall the chart's catalog "
            f'or create Model "{alias}"',
        )
    try:
        catalog = parse_catalog(document)
    except CatalogError as exc:
        return Problem(FIELD, "CatalogInvalid", f"{where} is invalid: {exc}; fix it")
    entry = catalog.get(alias)
    if entry is None:
        message = f'no entry "{alias}" in {where}: `longrun catalog list` shows the aliases'
        return Problem(FIELD, "CatalogEntryNotFound", message)
    gpus = spec.resources.gpu if spec.resources is not None else 0
    compute = entry.pick(asked, gpus=gpus, runtime=spec.runtime.kind)
    if compute is None:
        return Problem(
            FIELD,
            "CatalogVariantNotFound",
            f'the catalog entry "{alias}" has no {asked} variant (it has '
            f"{', '.join(entry.variants)}): set spec.model.catalog.compute to one of them",
        )
    model_spec = entry.model_spec(compute).to_wire()
    model_spec.pop("allowedNamespaces", None)  # a catalog Model is for its namespace only
    return _registration(obj, alias, compute, model_spec, where)


def _registration(
    obj: Obj, alias: str, compute: Compute, spec: dict[str, object], where: str
) -> Registration:
    meta = obj.get("metadata") or {}
    model: Obj = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "Model",
        "metadata": {
            "name": alias,
            "namespace": meta.get("namespace", ""),
            "labels": {MANAGED_BY: MANAGER, ENTRY_LABEL: alias},
            "annotations": {
                COMPUTE_ANNOTATION: compute,
                CREATED_FOR_ANNOTATION: str(meta.get("name", "")),
            },
        },
        "spec": spec,
    }
    message = (
        f'created Model "{alias}" from the {compute} variant of the catalog entry "{alias}" in '
        f"{where} (lazy registration)"
    )
    return Registration(model, message)
