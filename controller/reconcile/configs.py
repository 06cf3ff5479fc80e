"""Reconcile one InferenceConfig's own status: observe, decide, act.

A config owns no children; its status says whether any run can use it
(`controller.core.configs`). Only a changed status is written, with a Warning
event when the config becomes unusable.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from contracts.config import InferenceConfigStatus
from controller.core import names
from controller.core.conditions import find
from controller.core.configs import config_status
from controller.core.decide import is_deleting
from controller.core.ports import Cluster, Obj
from controller.core.settings import Settings
from controller.reconcile.runs import Result


class ConfigReconciler:
    """Keeps `InferenceConfig.status` (`Accepted`, `observedGeneration`) current."""

    def __init__(self, cluster: Cluster, settings: Settings, *, now: Callable[[], datetime]):
        self.cluster = cluster
        self.settings = settings
        self.now = now

    def reconcile(self, key: str) -> Result:
        """Converge one config's status (`key` is `namespace/name`)."""
        namespace, name = names.split_key(key)
        config = self.cluster.get_config(namespace, name)  # 1. observe
        if config is None or is_deleting(config):
            return Result()
        status = config_status(config, self.settings, now=self.now().replace(microsecond=0))
        self._publish(config, status)  # 2-3. decide, act
        return Result()

    def _publish(self, config: Obj, status: InferenceConfigStatus) -> None:
        new = status.to_wire()
        old = _wire(config.get("status"))
        if new == old:
            return
        meta = config["metadata"]
        patch: Obj = {**{k: None for k in old if k not in new}, **new}
        stored = self.cluster.patch_status(
            meta["namespace"], meta["name"], patch, kind="InferenceConfig"
        )
        accepted, was = find(status.conditions, "Accepted"), _accepted(old)
        if accepted is not None and accepted.status == "False" and was != accepted.reason:
            self.cluster.emit_event(
                {**stored, "kind": "InferenceConfig"},
                type_="Warning",
                reason=accepted.reason,
                message=accepted.message,
            )


def _wire(status: object) -> dict[str, object]:
    try:
        return InferenceConfigStatus.model_validate(status or {}).to_wire()
    except ValueError:
        return {"invalid": True}


def _accepted(wire: dict[str, object]) -> str | None:
    """The reason of a stored False `Accepted` condition, if any."""
    for item in wire.get("conditions") or []:  # type: ignore[attr-defined]
        if item.get("type") == "Accepted" and item.get("status") == "False":
            return str(item.get("reason"))
    return None
