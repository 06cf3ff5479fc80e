"""The node agent's one door to the API server: every request, plain dicts in and out.

Every call asks for the raw answer (`_preload_content=False`) and decodes the JSON
itself, for two reasons: the rest of the agent (and `local.podspec`) works on
dicts as the API sends them, and the generated models cannot even decode some
answers a kubelet gets (a `pods/binding` create answers a `Status`, which the
client would try to read as a `V1Binding` and fail). Failures become `ApiError`
with the HTTP status, so callers branch on 404/409 without importing the client.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]
NODE_LEASE_NAMESPACE = "kube-node-lease"
STRATEGIC = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A refused or failed request; `status` is the HTTP code (0: no answer at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@contextmanager
def _answers() -> Iterator[None]:
    """Turn the client's exceptions into ApiError (connection errors are status 0)."""
    try:
        yield
    except ApiException as exc:
        raise ApiError(int(exc.status or 0), _message(exc)) from exc
    except (OSError, urllib3.exceptions.HTTPError) as exc:  # no answer: refused, cut, retries out
        raise ApiError(0, str(exc)) from exc


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.body or exc.reason)


def _json(response: Any) -> Obj:
    data: Obj = json.loads(response.data or b"{}")
    return data


class Kube:
    """The calls a kubelet makes, on one ApiClient (thread-safe: urllib3 pools)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        # dict bodies: the client sends them as they are (its models are not used here)
        self.core: Any = client.CoreV1Api(api)
        self.coordination: Any = client.CoordinationV1Api(api)
        self._closed = threading.Event()

    @classmethod
    def from_kubeconfig(cls, path: str | Path) -> Kube:
        """A Kube for the current context of the kubeconfig at `path`."""
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(path), client_configuration=cfg)  # type: ignore[no-untyped-call]
        return cls(client.ApiClient(cfg))

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self.api.close()  # type: ignore[no-untyped-call]

    # -- pods ---------------------------------------------------------------------------
    def pod_lister(self, namespace: str | None) -> Callable[..., Any]:
        """A list/watch function of pods as dicts, in the shape SharedInformer expects."""
        if namespace is None:
            call: Callable[..., Any] = self.core.list_pod_for_all_namespaces
        else:
            call = lambda **kw: self.core.list_namespaced_pod(namespace, **kw)  # noqa: E731
        return _lister(call)

    def get_pod(self, namespace: str, name: str) -> Obj | None:
        try:
            with _answers():
                return _json(self.core.read_namespaced_pod(name, namespace, _preload_content=False))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def bind(self, pod: Obj, node: str) -> None:
        """POST pods/<name>/binding, the scheduler's way of setting spec.nodeName."""
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        with _answers():
            self.core.create_namespaced_pod_binding(
                meta["name"], meta["namespace"], body, _preload_content=False
            )

    def replace_pod_status(self, pod: Obj) -> Obj:
        """PUT pods/<name>/status with the pod's resourceVersion (409 when it moved on)."""
        meta = pod["metadata"]
        with _answers():
            answer = self.core.replace_namespaced_pod_status(
                meta["name"], meta["namespace"], pod, _preload_content=False
            )
        return _json(answer)

    def delete_pod_now(self, pod: Obj) -> None:
        """The kubelet's last word: delete with grace 0, only this uid (a new pod of the
        same name is not ours to remove)."""
        meta = pod["metadata"]
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with _answers():
            self.core.delete_namespaced_pod(
                meta["name"], meta["namespace"], body=body, _preload_content=False
            )

    # -- what pods mount ----------------------------------------------------------------
    def config_map(self, namespace: str, name: str) -> Obj | None:
        return self._get_or_none(self.core.read_namespaced_config_map, name, namespace)

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self._get_or_none(self.core.read_namespaced_secret, name, namespace)

    def request_token(self, namespace: str, account: str, spec: Obj) -> Obj:
        """POST serviceaccounts/<account>/token (TokenRequest): the answer's status has the
        token; a kubelet asks for the pods it runs."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        with _answers():
            answer = self.core.create_namespaced_service_account_token(
                account, namespace, body, _preload_content=False
            )
        return _json(answer)

    # -- node and lease -----------------------------------------------------------------
    def get_node(self, name: str) -> Obj | None:
        return self._get_or_none(self.core.read_node, name)

    def create_node(self, node: Obj) -> Obj:
        with _answers():
            return _json(self.core.create_node(node, _preload_content=False))

    def patch_node_status(self, name: str, patch: Obj) -> Obj:
        with _answers():
            answer = self.core.patch_node_status(
                name, patch, _content_type=STRATEGIC, _preload_content=False
            )
        return _json(answer)

    def get_lease(self, name: str) -> Obj | None:
        return self._get_or_none(
            self.coordination.read_namespaced_lease, name, NODE_LEASE_NAMESPACE
        )

    def create_lease(self, lease: Obj) -> Obj:
        with _answers():
            answer = self.coordination.create_namespaced_lease(
                NODE_LEASE_NAMESPACE, lease, _preload_content=False
            )
        return _json(answer)

    def replace_lease(self, lease: Obj) -> Obj:
        with _answers():
            answer = self.coordination.replace_namespaced_lease(
                lease["metadata"]["name"], NODE_LEASE_NAMESPACE, lease, _preload_content=False
            )
        return _json(answer)

    def _get_or_none(self, call: Callable[..., Any], *args: str) -> Obj | None:
        try:
            with _answers():
                return _json(call(*args, _preload_content=False))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise


def _lister(call: Callable[..., Any]) -> Callable[..., Any]:
    def list_or_watch(**kwargs: Any) -> Any:
        """List pods (items as dicts) or, with watch=True, open the raw watch stream.

        :rtype: object
        """
        if kwargs.get("watch"):
            # client-go's reflector: the server ends a watch after 5-10 minutes (randomised);
            # the informer then resumes from its last resourceVersion.
            kwargs.setdefault("timeout_seconds", random.randint(300, 600))
            return call(allow_watch_bookmarks=True, **kwargs)
        data = _json(call(_preload_content=False, **kwargs))
        meta = SimpleNamespace(resource_version=(data.get("metadata") or {}).get("resourceVersion"))
        return SimpleNamespace(items=data.get("items") or [], metadata=meta)

    return list_or_watch
