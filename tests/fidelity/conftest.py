"""Fixtures for the fidelity suite: every test runs once per backend, in a fresh namespace.

Real: both backends — the API emulator and, when its binaries are found, a private
kube-apiserver + etcd + kube-controller-manager (e2e/real) — each with longrun's CRDs
installed, driven through the official Python client and raw HTTP. Faked: nothing;
a difference between the two is either fixed in the emulator or listed, with its
reason, under "Known divergences" in e2e/README.md, and the test names it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.backends import KubeHandle
from e2e.fixtures import *  # noqa: F403

GROUP, VERSION = "longrun.dev", "v1alpha1"
Obj = dict[str, Any]


@dataclass
class Cluster:
    """One backend's clients, and a namespace of this test's own."""

    handle: KubeHandle
    ns: str
    api: client.ApiClient
    core: Any
    batch: Any
    custom: Any
    ext: Any
    events: Any

    @property
    def backend(self) -> str:
        return self.handle.backend

    @property
    def is_real(self) -> bool:
        return self.handle.backend == "real"

    def create_run(self, name: str, spec: Obj, **metadata: Any) -> Obj:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun",
                "metadata": {"name": name, **metadata}, "spec": spec}  # fmt: skip
        return self.custom.create_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "inferenceruns", body
        )

    def get_run(self, name: str) -> Obj:
        return self.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.ns, "inferenceruns", name
        )

    def raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Answer:
        """One HTTP request as it goes over the wire (answers of any status are returned)."""
        url = self.api.configuration.host + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        pool = self.api.rest_client.pool_manager
        resp = pool.request(method, url, body=data, headers=headers, timeout=30)
        return Answer(resp.status, dict(resp.headers), _json_or_text(resp.data))

    def watch(self, path: str, *, until: int, timeout: float = 10.0, **query: str) -> list[Obj]:
        """The first `until` events of a watch on `path` (fewer if it ends first)."""
        query = {"watch": "true", "timeoutSeconds": str(int(timeout)), **query}
        url = f"{self.api.configuration.host}{path}?{urlencode(query)}"
        pool = self.api.rest_client.pool_manager
        resp = pool.request("GET", url, preload_content=False, timeout=timeout + 5)
        events: list[Obj] = []
        try:
            assert resp.status == 200, resp.read()
            for line in resp:
                if line.strip():
                    events.append(json.loads(line))
                if len(events) >= until:
                    break
        finally:
            resp.close()  # the watch is still streaming: drop the connection
        return events

    def refusal(self, call: Callable[[], Any]) -> tuple[int, Obj]:
        """The HTTP status and Status body of a call that must fail."""
        with pytest.raises(ApiException) as caught:
            call()
        return refusal_of(caught.value)


@dataclass
class Answer:
    """An HTTP answer: status, headers, and the body parsed as JSON (else {"text": ...})."""

    status: int
    headers: dict[str, str]
    body: Obj


def _json_or_text(data: bytes) -> Obj:
    try:
        parsed = json.loads(data or b"{}")
    except ValueError:
        return {"text": data.decode(errors="replace")}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def refusal_of(exc: ApiException) -> tuple[int, Obj]:
    """(status, body) of a refused request; a body that is not JSON becomes {"text": ...}."""
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {"text": exc.body}
    return int(exc.status or 0), body


@pytest.fixture
def kube(kube_each_backend: KubeHandle) -> Iterator[Cluster]:
    """Clients for one backend (the test runs on each) and a fresh namespace."""
    api = kube_each_backend.api_client()
    cluster = Cluster(
        handle=kube_each_backend,
        ns=kube_each_backend.namespace("fidelity"),
        api=api,
        core=client.CoreV1Api(api),
        batch=client.BatchV1Api(api),
        custom=client.CustomObjectsApi(api),
        ext=client.ApiextensionsV1Api(api),
        events=client.EventsV1Api(api),
    )
    yield cluster
    api.close()  # type: ignore[no-untyped-call]


def wait_for(fn: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll until fn() is truthy (kubebuilder Eventually); generous for a loaded real server."""
    deadline = time.monotonic() + timeout
    while True:
        result = fn()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s (last: {result!r})")
        time.sleep(0.05)
