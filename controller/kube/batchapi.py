"""The Batch API server's door to Kubernetes: runs, configs, deployments and the two reviews.

`longrun batch-api` (batchapi/) is a shell of its own; like the controller it speaks to the
API server only through this adapter (plain JSON requests on the client's configuration,
`Transport`), so that `kubernetes` is imported nowhere else. It reads and writes no Secret.

What its ServiceAccount needs (the chart's batch-api ClusterRole): create on tokenreviews
(authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io); get, list, create and
patch on inferenceruns; get, list and create on inferenceconfigs; list on modeldeployments.
"""

from __future__ import annotations

from typing import Any

from controller.kube.transport import MERGE_PATCH, Transport, resource_path

Obj = dict[str, Any]
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class KubeBatchCluster:
    """`batchapi.ports.Cluster` and `Reviews` on a Kubernetes API server."""

    def __init__(self, transport: Transport, *, audiences: tuple[str, ...] = ()) -> None:
        self.transport = transport
        self.audiences = audiences  # TokenReview audiences; empty: the API server's own

    def create_run(self, namespace: str, run: Obj) -> Obj:
        path = resource_path("InferenceRun", namespace)
        return dict(self.transport.request("POST", path, body=run))

    def get_run(self, namespace: str, name: str) -> Obj | None:
        return self._get("InferenceRun", namespace, name)

    def list_runs(self, namespace: str, *, label_selector: str) -> list[Obj]:
        path = resource_path("InferenceRun", namespace)
        answer = self.transport.request("GET", path, query=[("labelSelector", label_selector)])
        return list(answer.get("items") or [])

    def patch_run(self, namespace: str, name: str, patch: Obj) -> Obj:
        path = resource_path("InferenceRun", namespace, name=name)
        return dict(self.transport.request("PATCH", path, body=patch, content_type=MERGE_PATCH))

    def create_config(self, namespace: str, config: Obj) -> None:
        self.transport.request("POST", resource_path("InferenceConfig", namespace), body=config)

    def get_config(self, namespace: str, name: str) -> Obj | None:
        return self._get("InferenceConfig", namespace, name)

    def list_configs(self, namespace: str) -> list[Obj]:
        answer = self.transport.request("GET", resource_path("InferenceConfig", namespace))
        return list(answer.get("items") or [])

    def list_deployments(self, namespace: str) -> list[Obj]:
        answer = self.transport.request("GET", resource_path("ModelDeployment", namespace))
        return list(answer.get("items") or [])

    def review_token(self, token: str) -> Obj | None:
        spec: Obj = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        status = (self.transport.request("POST", TOKEN_REVIEWS, body=review) or {}).get("status")
        if not status or not status.get("authenticated"):
            return None
        return dict(status.get("user") or {})

    def review_access(self, user: Obj, *, namespace: str, verb: str, name: str) -> bool:
        attributes = {
            "namespace": namespace,
            "verb": verb,
            "group": "longrun.dev",
            "resource": "inferenceruns",
        }
        if name:
            attributes["name"] = name
        spec: Obj = {
            "user": user.get("username", ""),
            "groups": list(user.get("groups") or []),
            "resourceAttributes": attributes,
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        answer = self.transport.request("POST", ACCESS_REVIEWS, body=review) or {}
        return bool((answer.get("status") or {}).get("allowed"))

    def _get(self, kind: str, namespace: str, name: str) -> Obj | None:
        from controller.core.ports import ApiError

        try:
            return dict(self.transport.request("GET", resource_path(kind, namespace, name=name)))
        except ApiError as exc:
            if exc.is_not_found:
                return None
            raise
