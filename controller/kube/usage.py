"""Which runs use which ModelDeployment, kept from the run adapter's events (thread-safe).

A run uses the deployment its config's `model.deploymentRef` names (controller/core/serving/
uses.py decides what "uses now" means); `KubeServing` feeds this index from `KubeCluster`'s
events, so runs and configs are watched once, and reads `usage` when it observes a deployment.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from controller.core.serving.ports import Usage


@dataclass
class RunUse:
    """What the index keeps of a run: its config, whether it uses its deployment now, when
    it finished."""

    config: str
    active: bool
    finished: datetime | None


class UsageIndex:
    """Which runs use which deployment, from the run cluster's events (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._target: dict[str, str] = {}  # config key -> deployment key
        self._configs: dict[str, set[str]] = defaultdict(set)  # deployment -> config keys
        self._runs: dict[str, RunUse] = {}
        self._runs_of: dict[str, set[str]] = defaultdict(set)  # config key -> run keys

    def set_config(self, key: str, target: str | None) -> tuple[str | None, str | None]:
        """Record a config's deployment; (old, new) targets."""
        with self._lock:
            old = self._target.pop(key, None)
            if old is not None:
                self._configs[old].discard(key)
            if target is not None:
                self._target[key] = target
                self._configs[target].add(key)
            return old, target

    def set_run(self, key: str, use: RunUse | None) -> tuple[str | None, bool]:
        """Record a run (None: it is gone); (its deployment, whether its activity changed)."""
        with self._lock:
            old = self._runs.pop(key, None)
            if old is not None:
                self._runs_of[old.config].discard(key)
            if use is not None:
                self._runs[key] = use
                self._runs_of[use.config].add(key)
            config = use.config if use is not None else old.config if old is not None else ""
            changed = (old is not None and old.active) != (use is not None and use.active)
            return self._target.get(config), changed

    def configs_of(self, deployment: str) -> list[str]:
        """Configs whose model.deploymentRef names `deployment`."""
        with self._lock:
            return sorted(self._configs.get(deployment, ()))

    def usage(self, deployment: str) -> Usage:
        """Active runs of `deployment`, and when the last inactive one finished."""
        with self._lock:
            runs = [
                (key, self._runs[key])
                for config in self._configs.get(deployment, ())
                for key in self._runs_of.get(config, ())
            ]
        active = tuple(sorted(key for key, use in runs if use.active))
        ended = [use.finished for _, use in runs if not use.active and use.finished is not None]
        return Usage(active, max(ended) if ended else None)
