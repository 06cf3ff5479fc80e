"""Everything one reconcile of a ModelDeployment read, as one frozen value.

The observer (controller/reconcile/deployments.py) fills it from the informer caches:
the ModelDeployment, the Model its `modelRef` names, the children found by label (see
names.py) and their pods, and the runs that use the deployment now. The API-key Secret is
not among them: the controller cannot read Secrets (keys.py says what it knows instead).
Deciding then needs nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from contracts.serving import ModelDeploymentStatus
from controller.core.ports import Obj
from controller.core.validation import Problem


@dataclass(frozen=True)
class ServingChildren:
    """The objects a deployment owns (None: not there), and its pods (old and new); the key
    Secret is never read, so it is not here."""

    deployment: Obj | None = None
    service: Obj | None = None
    config_map: Obj | None = None
    claim: Obj | None = None
    network_policy: Obj | None = None
    hpa: Obj | None = None
    certificate: Obj | None = None
    ingress: Obj | None = None
    pods: Sequence[Obj] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", tuple(self.pods))


@dataclass(frozen=True)
class ServingObserved:
    """One reconcile's view of a ModelDeployment.

    `active_runs` are the `namespace/name` keys of the runs admitted to the deployment that
    use it now (uses.py: waiting for it or running, not refused, not finished);
    `last_run_finished` is when the latest of them ended, if the observer knows. `answer`
    is what the API server answered to a child write, when only the user can fix it (a
    refusal, a name taken). `secret_answer` is what a write of the
    key Secret told this pass: it exists (AlreadyExists) or is missing (404 on a patch).
    `catalog` is why the Model a deployment names from the catalog was not made (catalog.py).
    """

    obj: Obj
    model: Obj | None = None
    children: ServingChildren = field(default_factory=ServingChildren)
    active_runs: Sequence[str] = ()
    last_run_finished: datetime | None = None
    answer: Problem | None = None
    secret_answer: Literal["exists", "missing"] | None = None
    catalog: Problem | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "active_runs", tuple(sorted(set(self.active_runs))))

    @property
    def generation(self) -> int:
        """The deployment's metadata.generation."""
        return int((self.obj.get("metadata") or {}).get("generation") or 0)

    @property
    def uid(self) -> str:
        """The deployment's UID (its children's owner references name it)."""
        return str((self.obj.get("metadata") or {}).get("uid") or "")

    @property
    def is_deleting(self) -> bool:
        """True once the deployment has a deletionTimestamp."""
        return bool((self.obj.get("metadata") or {}).get("deletionTimestamp"))

    @property
    def previous(self) -> ModelDeploymentStatus:
        """The stored status, or an empty one when absent or unreadable."""
        try:
            return ModelDeploymentStatus.model_validate(self.obj.get("status") or {})
        except ValueError:
            return ModelDeploymentStatus()
