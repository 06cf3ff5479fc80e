"""Plugin registry: storage kinds and model protocols by name, imported lazily.

Why a registry rather than a dict of imports: a runner image must be able to
add a storage backend or a model protocol with `pip install` alone (an entry
point in the `longrun.storage` / `longrun.protocols` groups), and the built-in
ones must not cost their heavy imports (boto3, sqlalchemy, tritonclient) unless
the contract uses them. This follows fsspec's `registry.py`: a name maps to a
"module:Class" string plus an install hint, resolved on first use.

Where names come from: the built-ins from the contracts' table (the settings
model of each `StorageSpec` field names its backend; `BUILTIN_PROTOCOLS` names
each client), third-party ones from entry points (contracts/plugins.py). A
storage entry point names the kind's settings model, which names its backend;
one naming the backend itself (a kind without a model, as plug-ins written
before the model existed do) works too.

Rules the code relies on:
- The same name with two different targets (two distributions, or a
  distribution and a built-in) is an error (reported when that name is used),
  never a silent "last one wins".
- `register()` is the in-process hook for tests; `LONGRUN_RUNNER_PLUGINS` is the
  same hook for a subprocess (a `python -m runners` started by a test):
  `group:name=module:Class` entries separated by `;` or `,`. Both replace a
  built-in or an entry point of the same name on purpose (that is their job).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.model import BUILTIN_PROTOCOLS
from contracts.plugins import PROTOCOLS_GROUP, STORAGE_GROUP, StorageSettings, entry_points
from contracts.storage import BUILTIN_KINDS
from runners.api import ConfigError, ModelClientFactory, StorageBackend

PLUGINS_ENV = "LONGRUN_RUNNER_PLUGINS"
RUNNER_EXTRA_HINT = "pip install 'longrun[runner]'"
SQL_DRIVERS_HINT = "pip install 'longrun[sql-drivers]'"

# Third-party modules a built-in plugin needs, and how to get them.
KNOWN_HINTS: dict[str, str] = {
    "boto3": RUNNER_EXTRA_HINT,
    "botocore": RUNNER_EXTRA_HINT,
    "sqlalchemy": RUNNER_EXTRA_HINT,
    "requests": RUNNER_EXTRA_HINT,
    "tritonclient": RUNNER_EXTRA_HINT,
    "numpy": RUNNER_EXTRA_HINT,
    "psycopg": SQL_DRIVERS_HINT,
    "pymysql": SQL_DRIVERS_HINT,
}

_WHAT = {STORAGE_GROUP: "storage backend", PROTOCOLS_GROUP: "model protocol"}


class RegistryError(ConfigError):
    """A plugin name that cannot be resolved: unknown, ambiguous or not installed."""


@dataclass
class Registry:
    """Name -> "module:Class" for one entry-point group and its built-ins, resolved lazily."""

    group: str
    builtins: Mapping[str, str] = field(default_factory=dict)
    _overrides: dict[str, str | Callable[..., Any]] = field(default_factory=dict)

    def register(self, name: str, target: str | Callable[..., Any]) -> None:
        """Register `name` in-process (tests), replacing any entry point of that name."""
        self._overrides[name] = target

    def unregister(self, name: str) -> None:
        """Forget an in-process registration (safe to repeat)."""
        self._overrides.pop(name, None)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(set(self.builtins) | set(entry_points(self.group)) | set(self._overrides))

    def load(self, name: str) -> Any:
        """The class (or factory) registered as `name`, imported now."""
        target = self._target(name)
        if not isinstance(target, str):
            return target
        return _import_target(target, what=f"{_WHAT.get(self.group, 'plugin')} {name!r}")

    def _target(self, name: str) -> str | Callable[..., Any]:
        if name in self._overrides:
            return self._overrides[name]
        env = _env_plugins().get((self.group, name))
        if env is not None:
            return env
        targets = set(entry_points(self.group).get(name, ()))
        if name in self.builtins:
            targets.add(self.builtins[name])
        if not targets:
            raise RegistryError(self._unknown_message(name))
        if len(targets) > 1:
            listed = ", ".join(sorted(targets))
            raise RegistryError(
                f"{_WHAT.get(self.group, 'plugin')} {name!r} is registered more than once "
                f"in entry-point group {self.group!r} ({listed}); uninstall one of the packages"
            )
        return next(iter(targets))

    def _unknown_message(self, name: str) -> str:
        what = _WHAT.get(self.group, "plugin")
        known = ", ".join(self.names()) or "none"
        return (
            f"no {what} registered for {name!r} (known: {known}); install a package that "
            f"declares an entry point {name!r} in group {self.group!r} "
            "(see docs/custom-runner.md)"
        )


def _import_target(target: str, *, what: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        hint = KNOWN_HINTS.get(missing)
        if hint is None:
            raise RegistryError(f"{what}: cannot import {module_name!r}: {exc}") from None
        raise RegistryError(f"{what} needs the {missing!r} package: {hint}") from None
    try:
        return getattr(module, attr) if attr else module
    except AttributeError:
        raise RegistryError(f"{what}: {module_name!r} has no attribute {attr!r}") from None


def _env_plugins() -> dict[tuple[str, str], str]:
    raw = os.environ.get(PLUGINS_ENV, "")
    found: dict[tuple[str, str], str] = {}
    for item in raw.replace(",", ";").split(";"):
        item = item.strip()
        if not item:
            continue
        left, sep, target = item.partition("=")
        group, colon, name = left.rpartition(":")
        if not (sep and colon and group and name and ":" in target):
            raise RegistryError(
                f"{PLUGINS_ENV}: {item!r} is not 'group:name=module:Class' "
                f"(e.g. {PROTOCOLS_GROUP}:echo=mypkg.echo:EchoClient)"
            )
        found[(group, name)] = target
    return found


storage_backends = Registry(
    STORAGE_GROUP, builtins={kind: model.backend for kind, model in BUILTIN_KINDS.items()}
)
model_protocols = Registry(PROTOCOLS_GROUP, builtins=BUILTIN_PROTOCOLS)


def storage_backend(kind: str) -> Callable[[], StorageBackend]:
    """The backend class (or factory) of storage `kind`, imported now.

    A target that is a settings model is replaced by the backend it names.
    """
    target = storage_backends.load(kind)
    if isinstance(target, type) and issubclass(target, StorageSettings):
        target = _import_target(target.backend, what=f"storage backend {kind!r}")
    backend: Callable[[], StorageBackend] = target
    return backend


def model_protocol(name: str) -> ModelClientFactory:
    """The ModelClientFactory registered for protocol `name`."""
    factory: ModelClientFactory = model_protocols.load(name)
    return factory
