"""Plug-ins installed as packages: the entry points longrun reads, and a storage kind's model.

Why in contracts: both sides read them. A storage plug-in's entry point (group
`longrun.storage`) names its settings model, a `StorageSettings`; the model
names the runner class that implements the kind as a "module:Class" string.
So the controller validates the kind's settings and finds their Secret
references by importing the model only (pydantic and contracts, never the
backend's libraries), and the runner imports the backend when a contract uses
the kind. Model protocols (group `longrun.protocols`) concern the runner only.

Rules the code relies on:
- The installed distributions are read once per process (`entry_points`);
  a test that puts a plug-in on sys.path clears that cache.
- A kind whose entry point cannot be imported, or names something other than a
  `StorageSettings` (a backend class, as plug-ins written before the model
  existed do), or is declared twice, passes through untouched here: the runner
  resolves it, and reports what is wrong with it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from importlib import metadata
from typing import Any, ClassVar

from pydantic import ValidationError

from contracts.base import Schema

STORAGE_GROUP = "longrun.storage"
PROTOCOLS_GROUP = "longrun.protocols"


class StorageSettings(Schema):
    """Base of a storage kind's settings model (built-in or plug-in).

    The model validates the kind's block `{<kind>: {...}}` wherever it appears
    (InferenceConfig, contract), and its Secret references (`SecretReference`
    fields) are mounted into the runner pod. `backend` names the runner's
    `StorageBackend` as "module:Class", imported only by the runner; the module
    defining the model must import nothing but pydantic and contracts.
    """

    backend: ClassVar[str]


@functools.cache
def entry_points(group: str) -> dict[str, frozenset[str]]:
    """Name -> the distinct targets ("module:attr") the installed packages declare in `group`.

    The same distribution can be listed twice (an editable install seen through two
    paths): identical targets collapse in the set.
    """
    found: dict[str, set[str]] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, set()).add(ep.value)
    return {name: frozenset(targets) for name, targets in found.items()}


def plugin_settings(kind: str, body: Mapping[str, Any]) -> StorageSettings | None:
    """`body` validated by the settings model an installed plug-in declares for `kind`.

    None without such a plug-in (the kind passes through); ValueError naming the first
    wrong field, as `<kind>.<field>: <what is wrong>`, when `body` is not valid.
    """
    model = _settings_model(kind)
    if model is None:
        return None
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors()
        where = ".".join(str(part) for part in (kind, *errors[0]["loc"]))
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ValueError(f"{where}: {errors[0]['msg']}{more}") from None


def _settings_model(kind: str) -> type[StorageSettings] | None:
    targets = entry_points(STORAGE_GROUP).get(kind, frozenset())
    if len(targets) != 1:
        return None
    found = _imported(next(iter(targets)))
    if isinstance(found, type) and issubclass(found, StorageSettings):
        return found
    return None


def _imported(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr, None)
    except Exception:  # a broken plug-in must not break validation: the runner reports it
        return None
