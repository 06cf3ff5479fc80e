"""Lazy registration, the act half: make the Model a deployment names from the catalog.

Runs between observing and deciding a ModelDeployment (deployments.py): when the deployment
names a catalog entry (`spec.model.catalog`) and the Model of that name is not in its
namespace, read the catalog ConfigMap live (only then: a deployment whose Model exists never
reads it), create the Model that `controller.core.serving.catalog.registration` describes,
and record a Normal Event on the deployment saying so. What stops it (no catalog, lazy
registration off, an unknown alias, an invalid catalog) goes into the observation, and the
decision reports it as the deployment's condition and a Warning Event.
"""

from __future__ import annotations

from dataclasses import replace

import yaml

from contracts.serving import CATALOG_KEY
from controller.core import names as run_names
from controller.core.ports import ApiError, Obj
from controller.core.resolve import identity
from controller.core.serving.catalog import (
    FIELD,
    CatalogSettings,
    catalog_choice,
    catalog_invalid,
    not_registered,
    registration,
)
from controller.core.serving.observed import ServingObserved
from controller.core.serving.ports import ServingCluster
from controller.core.serving.resolve import parse_spec
from controller.core.validation import Problem
from controller.reconcile.act import is_refusal

REGISTERED = "ModelRegistered"


def register(
    cluster: ServingCluster, obs: ServingObserved, settings: CatalogSettings
) -> ServingObserved:
    """The observation with the catalog's Model made (or why it was not), when the
    deployment names a catalog entry whose Model is missing; else unchanged."""
    if obs.model is not None or obs.is_deleting:
        return obs
    spec = parse_spec(obs.obj)
    if isinstance(spec, Problem) or (choice := catalog_choice(spec)) is None:
        return obs
    namespace = identity(obs.obj).namespace
    if problem := not_registered(choice[0], namespace, settings):
        return replace(obs, catalog=problem)
    document = _read_catalog(cluster, settings)
    if isinstance(document, Problem):
        return replace(obs, catalog=document)
    found = registration(document, obj=obs.obj, spec=spec, settings=settings)
    if isinstance(found, Problem):
        return replace(obs, catalog=found)
    try:
        model = cluster.create("Model", found.model)
    except ApiError as exc:
        if is_refusal(exc):
            message = f'the API server refused Model "{choice[0]}" ({exc.status}): {exc.message}'
            return replace(obs, catalog=Problem(FIELD, "ModelRejected", message))
        if not exc.is_already_exists:
            raise
        # Made since the cache was read: serve it (None: deleted since; the next pass sees).
        return replace(obs, model=cluster.read("Model", namespace, choice[0]))
    event: Obj = {**obs.obj, "kind": "ModelDeployment"}
    cluster.emit_event(event, type_="Normal", reason=REGISTERED, message=found.message)
    return replace(obs, model=model)


def _read_catalog(cluster: ServingCluster, settings: CatalogSettings) -> object | Problem:
    """The parsed catalog.yaml (None: no ConfigMap or no key), or why it is unreadable."""
    namespace, name = run_names.split_key(settings.config_map)
    config_map = cluster.read("ConfigMap", namespace, name)
    text = ((config_map or {}).get("data") or {}).get(CATALOG_KEY)
    if text is None:
        return None
    try:
        document: object = yaml.safe_load(text)
        return document
    except yaml.YAMLError as exc:
        return catalog_invalid(settings, f"{CATALOG_KEY} is not YAML ({_first_line(exc)})")


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
