"""Helpers for the serving tests on the API emulator: ModelDeployments, their children, and
Deployment and pod states written the way a Deployment controller and a kubelet would."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from e2e.fixtures import eventually
from tests.controller.emulated.harness import GROUP, VERSION, Env

Obj = dict[str, Any]
SKLEARN = {"source": "s3://models/iris/model.joblib", "format": "sklearn"}
GGUF = {"source": "hf://org/chat-GGUF/chat.Q4_K_M.gguf@main", "format": "gguf"}


def plain(item: Any) -> Obj:
    """A client model (or dict) as a plain dict."""
    return client.ApiClient().sanitize_for_serialization(item)  # type: ignore[no-any-return]


class Serving:
    """ModelDeployments and what they own, in one test namespace."""

    def __init__(self, env: Env) -> None:
        self.env = env
        api = env.kube.api_client()
        self.apps = client.AppsV1Api(api)
        self.net = client.NetworkingV1Api(api)
        self.scaling = client.AutoscalingV2Api(api)

    @property
    def ns(self) -> str:
        return self.env.ns

    def create(self, name: str = "iris", **spec: Any) -> Obj:
        spec.setdefault("model", copy.deepcopy(SKLEARN))
        spec.setdefault("runtime", {"kserve": {"protocol": "v1"}})
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ModelDeployment",
            "metadata": {"name": name},
            "spec": spec,
        }
        return self.env.custom.create_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "modeldeployments", body
        )

    def patch(self, name: str, patch: Obj) -> Obj:
        return self.env.custom.patch_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "modeldeployments", name, patch
        )

    def delete(self, name: str) -> None:
        self.env.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.ns, "modeldeployments", name
        )

    def get(self, name: str = "iris") -> Obj | None:
        try:
            return self.env.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
                GROUP, VERSION, self.ns, "modeldeployments", name
            )
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, name: str = "iris") -> Obj:
        return (self.get(name) or {}).get("status") or {}

    def wait_phase(self, phase: str, name: str = "iris", timeout: float = 30.0) -> Obj:
        return eventually(
            lambda: self.status(name).get("phase") == phase and self.status(name),
            timeout=timeout,
        )

    def condition(self, type_: str, name: str = "iris") -> Obj:
        found = [c for c in self.status(name).get("conditions", []) if c["type"] == type_]
        return found[0] if found else {}

    # -- children ---------------------------------------------------------------------------
    def deployment(self, name: str = "iris") -> Obj | None:
        try:
            return plain(self.apps.read_namespaced_deployment(name, self.ns))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_deployment(self, name: str = "iris", **match: Any) -> Obj:
        def found() -> Obj | None:
            dep = self.deployment(name)
            spec = (dep or {}).get("spec") or {}
            ok = dep is not None and all(spec.get(k) == v for k, v in match.items())
            return dep if ok else None

        return eventually(found, timeout=30)

    def secret(self, name: str) -> Obj | None:
        try:
            return plain(self.env.core.read_namespaced_secret(name, self.ns))
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def set_rollout(self, name: str = "iris", *, ready: int, updated: int | None = None) -> None:
        """Write the Deployment's status as its controller would after a rollout."""
        dep = self.wait_deployment(name)
        replicas = dep["spec"].get("replicas") or 0
        status = {
            "observedGeneration": dep["metadata"]["generation"],
            "replicas": replicas,
            "updatedReplicas": replicas if updated is None else updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {"type": "Available", "status": "True" if ready else "False"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }
        self.apps.patch_namespaced_deployment_status(name, self.ns, {"status": status})

    def add_pod(self, deployment: str, status: Obj, *, pod: str = "iris-abc") -> None:
        """A server pod of `deployment` in the state `status` (written as a kubelet would)."""
        body = {
            "metadata": {
                "name": pod,
                "labels": {
                    "longrun.dev/model-deployment": deployment,
                    "app.kubernetes.io/component": "model-server",
                    "app.kubernetes.io/managed-by": "longrun",
                },
                "annotations": {"longrun.dev/model-deployment": deployment},
            },
            "spec": {"containers": [{"name": "server", "image": "kserve/sklearnserver:v0.14.1"}]},
        }
        # The emulator's own kubelet runs every new pod: hold this one Running, and write
        # the test's status only after that, so no kubelet write can overwrite it.
        self.env.scripted.script(pod_prefix=pod, hold=True)
        self.env.core.create_namespaced_pod(self.ns, body)
        eventually(
            lambda: (
                (plain(self.env.core.read_namespaced_pod(pod, self.ns)).get("status") or {}).get(
                    "phase"
                )
                == "Running"
            ),
            timeout=30,
        )

        def written() -> bool:
            self.env.core.patch_namespaced_pod_status(pod, self.ns, {"status": status})
            got = plain(self.env.core.read_namespaced_pod(pod, self.ns)).get("status") or {}
            return got.get("containerStatuses") == status.get("containerStatuses")

        eventually(written, timeout=30)
