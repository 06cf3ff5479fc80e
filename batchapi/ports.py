"""What the Batch API needs from a cluster: runs and their configs, templates, and reviews.

Two implementations: a Kubernetes API server through the controller's adapter
(`controller.kube.batchapi.KubeBatchCluster`, the only place that speaks to it), and this
machine (`batchapi.local.cluster.LocalCluster`, runs executed by `longrun run`). Failures are
`controller.core.ports.ApiError` with the API server's status (404, 409, ...), as everywhere
in the controller.
"""

from __future__ import annotations

from typing import Any, Protocol

Obj = dict[str, Any]


class Cluster(Protocol):
    """InferenceRuns and InferenceConfigs of a namespace, and what may serve a batch."""

    def create_run(self, namespace: str, run: Obj) -> Obj:
        """Create an InferenceRun; the stored object (with its uid)."""

    def get_run(self, namespace: str, name: str) -> Obj | None:
        """An InferenceRun, None when there is none."""

    def list_runs(self, namespace: str, *, label_selector: str) -> list[Obj]:
        """The InferenceRuns of a namespace that carry the labels."""

    def patch_run(self, namespace: str, name: str, patch: Obj) -> Obj:
        """Merge-patch an InferenceRun; the patched object."""

    def create_config(self, namespace: str, config: Obj) -> None:
        """Create an InferenceConfig (409 when it exists)."""

    def get_config(self, namespace: str, name: str) -> Obj | None:
        """An InferenceConfig, None when there is none."""

    def list_configs(self, namespace: str) -> list[Obj]:
        """Every InferenceConfig of a namespace."""

    def list_deployments(self, namespace: str) -> list[Obj]:
        """Every ModelDeployment of a namespace."""


class Reviews(Protocol):
    """Who a bearer token is, and whether they may do something: the API server decides."""

    def review_token(self, token: str) -> Obj | None:
        """The user (`{"username", "uid", "groups", "extra"}`) a TokenReview authenticates,
        None when the token is not accepted (unknown, expired, revoked)."""

    def review_access(self, user: Obj, *, namespace: str, verb: str, name: str) -> bool:
        """Whether a SubjectAccessReview allows `verb` on InferenceRuns (longrun.dev) in
        `namespace` (on the run `name` when given) for that user."""
