"""Which runs use which ModelDeployment, kept from the run adapter's events (thread-safe).

A run counts for the deployment it was admitted to (`status.modelDeployment`, which the
run's reconcile sets once the deployment allows the run), while it is live;
controller/core/serving/uses.py decides both. `KubeServing` feeds this index from
`KubeCluster`'s events, so runs and configs are watched once, and reads `usage` when it
observes a deployment. Configs are indexed by the deployment their `model.deploymentRef`
names, so a deployment whose endpoint or availability changes wakes the runs that wait.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from controller.core.serving.ports import Usage


@dataclass(frozen=True)
class RunUse:
    """What the index keeps of a run: the deployment it was admitted to, whether it uses it
    now, when it finished."""

    deployment: str | None
    active: bool
    finished: datetime | None


class UsageIndex:
    """Which runs use which deployment, from the run cluster's events (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._target: dict[str, str] = {}  # config key -> deployment key
        self._configs: dict[str, set[str]] = defaultdict(set)  # deployment -> config keys
        self._runs: dict[str, RunUse] = {}
        self._runs_of: dict[str, set[str]] = defaultdict(set)  # deployment -> run keys

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

    def set_run(self, key: str, use: RunUse | None) -> set[str]:
        """Record a run (None: it is gone); the deployments whose count it changed."""
        with self._lock:
            old = self._runs.pop(key, None)
            if old is not None and old.deployment is not None:
                self._runs_of[old.deployment].discard(key)
            if use is not None and use.deployment is not None:
                self._runs[key] = use
                self._runs_of[use.deployment].add(key)
        before = (old.deployment, old.active) if old is not None else (None, False)
        after = (use.deployment, use.active) if use is not None else (None, False)
        if before == after:
            return set()
        return {d for d, _ in (before, after) if d is not None}

    def configs_of(self, deployment: str) -> list[str]:
        """Configs whose model.deploymentRef names `deployment`."""
        with self._lock:
            return sorted(self._configs.get(deployment, ()))

    def usage(self, deployment: str) -> Usage:
        """Active runs of `deployment`, and when the last inactive one finished."""
        with self._lock:
            runs = [(key, self._runs[key]) for key in self._runs_of.get(deployment, ())]
        active = tuple(sorted(key for key, use in runs if use.active))
        ended = [use.finished for _, use in runs if not use.active and use.finished is not None]
        return Usage(active, max(ended) if ended else None)
