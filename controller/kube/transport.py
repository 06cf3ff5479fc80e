# The official client is untyped; this adapter is the only place that calls it.
# mypy: disable-error-code="no-untyped-call"
"""Raw JSON requests on the official client's configuration, auth, TLS and connection pool.

The `ApiClient` builds the urllib3 pool (certificates, proxies, keepalive) and keeps the
credentials (a token file's refresh hook included); requests are sent on that pool
directly, as JSON encoded once. The client's own request path (`param_serialize`,
`call_api`, `RESTClientObject`) walks every body to sanitise it and parses the URL
again for every call, which cost the controller about a third of its CPU on a busy
API server; objects stay dicts (a third of the memory, and the reconciler wants dicts
anyway). Every failure becomes our `ApiError`, so nothing outside this package sees a
`kubernetes` exception.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from contracts.resources import GROUP, VERSION
from controller.core.ports import ApiError

CRD_PREFIX = f"/apis/{GROUP}/{VERSION}"
PATHS: dict[str, tuple[str, str]] = {
    "InferenceRun": (CRD_PREFIX, "inferenceruns"),
    "InferenceConfig": (CRD_PREFIX, "inferenceconfigs"),
    "Job": ("/apis/batch/v1", "jobs"),
    "CronJob": ("/apis/batch/v1", "cronjobs"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Pod": ("/api/v1", "pods"),
    "Event": ("/api/v1", "events"),
    # The serving half (controller/kube/serving.py). Secrets are only ever written there.
    "ModelDeployment": (CRD_PREFIX, "modeldeployments"),
    "Model": (CRD_PREFIX, "models"),
    "Secret": ("/api/v1", "secrets"),
    "Service": ("/api/v1", "services"),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
    "Ingress": ("/apis/networking.k8s.io/v1", "ingresses"),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
    "Certificate": ("/apis/cert-manager.io/v1", "certificates"),
    # External hosts (controller/kube/fleets.py): a Secret is read there only for a host's
    # credentials, when the chart allows it (docs/security.md).
    "InferenceHost": (CRD_PREFIX, "inferencehosts"),
    "InferenceModel": (CRD_PREFIX, "inferencemodels"),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices"),
    # Kueue's (controller/kube/workloads.py): patched for a queued run's suspend and cancel only.
    "Workload": ("/apis/kueue.x-k8s.io/v1beta1", "workloads"),
}
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CONNECT_TIMEOUT, READ_TIMEOUT = 10.0, 60.0  # seconds, for every request but watches


def load_api_client(kubeconfig: str | None = None, *, context: str | None = None) -> Any:
    """An ApiClient from a kubeconfig file, else the in-cluster service account."""
    if kubeconfig:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
        return k8s.ApiClient(configuration)
    try:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(context=context, client_configuration=configuration)
    return k8s.ApiClient(configuration)


def with_pool_size(api_client: Any, size: int) -> Any:
    """A copy of `api_client` whose connection pool fits every watch plus every worker, with
    TCP keepalive on its sockets.

    Each informer holds one connection open for its watch; with the default pool
    (5 per CPU) the workers' requests would keep opening and discarding connections.
    Keepalive (the client's `keep_alive`: client-go's timings, 30 s idle, then 9 probes
    15 s apart) ends a watch whose peer vanished without a FIN or RST (a node lost, an idle
    connection dropped by a load balancer), so the informer reconnects instead of waiting
    on a dead socket for ever; watches have no read timeout (see `Transport.stream`).
    """
    configuration = copy.deepcopy(api_client.configuration)
    configuration.connection_pool_maxsize = max(size, configuration.connection_pool_maxsize or 0)
    configuration.keep_alive = True
    return k8s.ApiClient(configuration)


def resource_path(
    kind: str, namespace: str | None = None, *, name: str | None = None, sub: str | None = None
) -> str:
    """The REST path of a collection or an object."""
    prefix, plural = PATHS[kind]
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    if name:
        path += f"/{name}"
    return f"{path}/{sub}" if sub else path


class Transport:
    """Raw JSON requests on the official client's ApiClient (auth, TLS, pooling)."""

    def __init__(
        self,
        api_client: Any,
        *,
        on_request: Callable[[str], None] | None = None,
        timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT),
    ):
        self.api_client = api_client
        self._on_request = on_request
        self.timeout = timeout  # (connect, read) seconds, for every request but watches
        host = str(api_client.configuration.host).rstrip("/")
        self._host = host
        self._base_path = urlsplit(host).path
        self._manager = api_client.rest_client.pool_manager
        self._pool: Any = None

    def request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send a request; the decoded JSON body, or ApiError."""
        resp = self._send(
            method, path, query=query, body=body, content_type=content_type, timeout=self.timeout
        )
        data = resp.data
        if not 200 <= resp.status < 300:
            raise _api_error(resp.status, data, headers=resp.headers)
        return json.loads(data) if data else None

    def request_text(self, path: str, *, query: list[tuple[str, Any]]) -> str:
        """GET a plain-text answer (a pod's log); the text, or ApiError."""
        resp = self._send(
            "GET",
            path,
            query=query,
            body=None,
            content_type="application/json",
            timeout=self.timeout,
            accept="text/plain, */*",
        )
        data = resp.data
        if not 200 <= resp.status < 300:
            raise _api_error(resp.status, data, headers=resp.headers)
        return bytes(data).decode("utf-8", "replace")

    def stream(self, path: str, *, query: list[tuple[str, Any]]) -> Any:
        """An open watch response (urllib3), for `kubernetes.watch.Watch`.

        No client-side timeout: the server ends the watch (`timeoutSeconds`). A socket
        read timeout here broke resumption when the server restarted mid-watch
        (tests/controller/emulated/test_resilience.py caught it).
        """
        resp = self._send(
            "GET", path, query=query, body=None, content_type="application/json", timeout=None
        )
        if not 200 <= resp.status < 300:
            data = resp.data
            raise ApiException(status=resp.status, reason=str(data[:200]))
        return resp

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Any,
        body: Any,
        content_type: str,
        timeout: tuple[float, float] | None,
        accept: str = "application/json",
    ) -> Any:
        """The urllib3 response (not read yet); ApiError when nothing came back."""
        if self._on_request is not None:
            self._on_request(method)
        target = self._base_path + path + (f"?{_query_string(query)}" if query else "")
        data = None if body is None else json.dumps(body, default=_jsonable).encode()
        try:
            # Timeouts: a half-open connection must fail, not hang a worker forever.
            return self._open(
                method,
                target,
                body=data,
                headers=self._headers(accept, content_type),
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]) if timeout else None,
                preload_content=False,
            )
        except Exception as exc:  # connection refused, reset, timeouts, TLS
            raise ApiError(0, f"{type(exc).__name__}: {exc}") from exc

    def _open(self, method: str, target: str, **kwargs: Any) -> Any:
        manager = self._manager
        if type(manager) is not urllib3.PoolManager:  # a proxy wants the whole URL
            return manager.urlopen(method, self._host + target[len(self._base_path) :], **kwargs)
        pool = self._pool
        if pool is None or pool.pool is None:  # not made yet, or closed with its manager
            pool = self._pool = manager.connection_from_url(self._host)
        return pool.urlopen(method, target, **kwargs)

    def _headers(self, accept: str, content_type: str) -> dict[str, str]:
        """The client's default headers and cookie, and its credentials (asked for on every
        request, so that a token file's refresh hook runs as it would in the client)."""
        client = self.api_client
        headers = {**client.default_headers, "Accept": accept, "Content-Type": content_type}
        if client.cookie:
            headers["Cookie"] = client.cookie
        auth = client.configuration.auth_settings().get("BearerToken")
        if auth and auth.get("value"):
            headers[auth["key"]] = auth["value"]
        return headers


def _query_string(query: list[tuple[str, Any]]) -> str:
    """`a=1&b=true` as the client writes it (booleans in lower case, values quoted)."""
    return "&".join(
        f"{key}={quote(str(value).lower() if isinstance(value, bool) else str(value))}"
        for key, value in query
    )


def _jsonable(value: Any) -> Any:
    """What `json.dumps` cannot encode, as the client would send it (dates as ISO 8601)."""
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _api_error(status: int, data: bytes, *, headers: Any) -> ApiError:
    message = data.decode("utf-8", "replace")[:500] if data else ""
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(data).get("message", message)
    retry = headers.get("Retry-After") if headers is not None else None
    try:
        retry_after = float(retry) if retry else None
    except ValueError:
        retry_after = None
    return ApiError(status, message, retry_after=retry_after)
