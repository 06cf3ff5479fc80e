"""What every child of a run shares: the resolved run it is built from, and its metadata.

The builders of the contract (controller/core/builders.py) and of the runner pod
(controller/core/runnerpod.py) both start from a `Resolved` run; the owner reference and
labels here are what makes deletion cascade and what the informers select on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contracts.config import InferenceConfigSpec
from contracts.resources import API_VERSION
from contracts.run import InferenceRunSpec
from controller.core import names
from controller.core.settings import Settings

Manifest = dict[str, Any]


@dataclass(frozen=True)
class ObjectIdentity:
    """The metadata of a run or config that rendering needs."""

    name: str
    namespace: str
    uid: str = ""
    generation: int = 0


@dataclass(frozen=True)
class Resolved:
    """A run with its config, both validated: everything the builders need."""

    run: ObjectIdentity
    spec: InferenceRunSpec
    config: ObjectIdentity
    config_spec: InferenceConfigSpec

    @property
    def child_name(self) -> str:
        """The Job (one-shot) or CronJob (scheduled) name."""
        if self.spec.is_scheduled:
            return names.cron_job_name(self.run.name)
        return names.job_name(self.run.name)


def image_of(resolved: Resolved, settings: Settings) -> str:
    """The runner image: the config's, else the controller's default."""
    return resolved.config_spec.image or settings.default_runner_image


def service_account_of(resolved: Resolved, settings: Settings) -> str | None:
    """The runner pod's ServiceAccount: the config's, else RUNNER_SERVICE_ACCOUNT."""
    return resolved.config_spec.pod.service_account_name or settings.runner_service_account


def owner_reference(owner: ObjectIdentity, kind: str = "InferenceRun") -> Manifest:
    """An owner reference making `owner` (a run, or a longrun object of `kind`) the controller
    of a child: deleting it cascades."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels_of(run: ObjectIdentity) -> dict[str, str]:
    """Labels on every object and pod a run owns (the informers select on them)."""
    return {
        names.MANAGED_BY: names.MANAGER,
        names.RUN_LABEL: names.run_label_value(run.name),
    }


def child_metadata(resolved: Resolved, name: str) -> Manifest:
    """Metadata of an object owned by the run."""
    return {
        "name": name,
        "namespace": resolved.run.namespace,
        "labels": labels_of(resolved.run),
        "annotations": {names.RUN_ANNOTATION: resolved.run.name},
        "ownerReferences": [owner_reference(resolved.run)],
    }
