"""Plugin registry: storage kinds and model protocols by name, imported lazily.

Why a registry rather than a dict of imports: a runner image must be able to
add a storage backend or a model protocol with `pip install` alone (an entry
point in the `longrun.storage` / `longrun.protocols` groups), and the built-in
ones must not cost their heavy imports (boto3, sqlalchemy, tritonclient) unless
the contract uses them. This follows fsspec's `registry.py`: a name maps to a
"module:Class" string plus an install hint, resolved on first use.

Rules the code relies on:
- Two distributions declaring the same name with different targets is an error
  (reported when that name is used), never a silent "last one wins".
- `register()` is the in-process hook for tests; `LONGRUN_RUNNER_PLUGINS` is the
  same hook for a subprocess (a `python -m runners` started by a test):
  `group:name=module:Class` entries separated by `;` or `,`. Both replace an
  entry-point registration of the same name on purpose (that is their job).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from runners.api import ConfigError

STORAGE_GROUP = "longrun.storage"
PROTOCOLS_GROUP = "longrun.protocols"
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
    """Name -> "module:Class" for one entry-point group, resolved lazily."""

    group: str
    _targets: dict[str, set[str]] = field(default_factory=dict)
    _overrides: dict[str, str | Callable[..., Any]] = field(default_factory=dict)
    _loaded: bool = False

    def register(self, name: str, target: str | Callable[..., Any]) -> None:
        """Register `name` in-process (tests), replacing any entry point of that name."""
        self._overrides[name] = target

    def unregister(self, name: str) -> None:
        """Forget an in-process registration (safe to repeat)."""
        self._overrides.pop(name, None)

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self._load_entry_points()
        return sorted(set(self._targets) | set(self._overrides))

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
        self._load_entry_points()
        targets = self._targets.get(name)
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

    def _load_entry_points(self) -> None:
        if self._loaded:
            return
        for ep in metadata.entry_points(group=self.group):
            # The same distribution can be listed twice (e.g. an editable install seen
            # through two paths): identical targets collapse in the set.
            self._targets.setdefault(ep.name, set()).add(ep.value)
        self._loaded = True


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


storage_backends = Registry(STORAGE_GROUP)
model_protocols = Registry(PROTOCOLS_GROUP)


def storage_backend(kind: str) -> Any:
    """An instance of the storage backend registered for `kind`."""
    return storage_backends.load(kind)()


def model_protocol(name: str) -> Any:
    """The ModelClientFactory registered for protocol `name`."""
    return model_protocols.load(name)
