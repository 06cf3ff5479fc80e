"""The narrow interface between the reconciler and Kubernetes.

The reconciler sees plain dicts and these few calls; `controller.kube` implements
them on the official client, and tests implement them in memory. Errors are ours
too, so nothing outside the adapter imports `kubernetes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Obj = dict[str, Any]
Kind = Literal["ConfigMap", "Job", "CronJob", "InferenceRun", "Workload"]
StatusKind = Literal["InferenceRun", "InferenceConfig"]
EventType = Literal["Normal", "Warning"]


class ApiError(Exception):
    """A failed API request; `status` is the HTTP status (0 for connection errors)."""

    def __init__(self, status: int, message: str = "", *, retry_after: float | None = None):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.retry_after = retry_after

    @property
    def is_not_found(self) -> bool:
        """404."""
        return self.status == 404

    @property
    def is_already_exists(self) -> bool:
        """409 on create (AlreadyExists)."""
        return self.status == 409


@dataclass
class Children:
    """What the cache holds that belongs to one run."""

    config_map: Obj | None = None
    job: Obj | None = None
    cron_job: Obj | None = None
    jobs: list[Obj] = field(default_factory=list)  # Jobs spawned by the run's CronJob
    pods: list[Obj] = field(default_factory=list)
    workload: Obj | None = None  # Kueue's Workload of the one-shot run's Job
    # Pods deleted after their runner container ended, as the watch last delivered them: a
    # suspended or cancelled Job's pods go at once, and the runner's summary with them.
    stopped_pods: list[Obj] = field(default_factory=list)


class Cluster(Protocol):
    """Reads from the informer caches, writes to the API server."""

    def get_run(self, namespace: str, name: str) -> Obj | None:
        """The cached InferenceRun."""
        ...

    def get_config(self, namespace: str, name: str) -> Obj | None:
        """The cached InferenceConfig."""
        ...

    def children(self, namespace: str, run_name: str) -> Children:
        """The cached objects owned by (or spawned for) a run."""
        ...

    def job_pods(self, namespace: str, job_name: str) -> list[Obj]:
        """A live list of a Job's pods (when the pod cache lags behind the Job's)."""
        ...

    def pod_log(
        self, namespace: str, name: str, *, container: str, tail_lines: int, limit_bytes: int
    ) -> str:
        """The last `tail_lines` lines of a container's log, at most `limit_bytes` of them
        (the `pods/log` subresource); raises ApiError."""
        ...

    def read(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        """A live read (after AlreadyExists, when the cache may lag)."""
        ...

    def create(self, kind: Kind, body: Obj) -> Obj:
        """Create an object; raises ApiError (409 when it exists)."""
        ...

    def patch(self, kind: Kind, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        """A JSON merge patch (dict body) or JSON patch (list body) of an object."""
        ...

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, kind: StatusKind = "InferenceRun"
    ) -> Obj:
        """JSON merge patch of a run's (or a config's) /status subresource."""
        ...

    def delete(self, kind: Kind, namespace: str, name: str, *, uid: str) -> None:
        """Delete with Background propagation, only if the object still has `uid`."""
        ...

    def emit_event(self, obj: Obj, *, type_: EventType, reason: str, message: str) -> None:
        """Record a Kubernetes Event about a run or config (`obj["kind"]`, InferenceRun when
        absent); best effort: never raises."""
        ...
