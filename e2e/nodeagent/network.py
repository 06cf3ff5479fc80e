"""Pod networking on one machine: an address per pod, and Services found without DNS.

A cluster gives each pod a network namespace and an IP; containers of one pod share it,
so a sidecar reaches its runtime on 127.0.0.1 and two pods both listen on 8080. Here
every pod gets an address of its own on the loopback network, `127.a.b.c` (Linux routes
all of 127.0.0.0/8 to `lo`, no setup and no privilege needed): it is the pod's
`status.podIP`, its containers bind it (the runtime mapping passes it as the server's host
flag), and the pod's own 127.0.0.1 becomes it (the auth sidecar's upstream). Ports are
the pod's own, unchanged. Addresses come from a hash of the pod's uid outside 127.0.0.0/16,
and are unique among the pods of this process (a node's IPAM); two agent processes on one
machine collide with odds of one in sixteen million per pair of pods.

Services are what kube-proxy and cluster DNS make of them, for the processes this agent
starts and without touching /etc/hosts: when a pod starts, each `NAME.NS.svc[.DOMAIN][:PORT]`
in its runner contract (the `contract.json` of a mounted ConfigMap) is replaced by the
address and target port of a ready endpoint of that Service. kube-proxy reads those from
the Service's EndpointSlices, and so does this, first; but kube-apiserver refuses loopback
addresses in an EndpointSlice (`may not be in the loopback range`, the CVE-2021-25737
check), so kube-controller-manager's EndpointSlice controller cannot list these pods
(it records `FailedToUpdateEndpointSlices` on the Service) and the endpoints are then
what that controller computes: the pods the Service selects that are Ready and have an
address, the target port looked up by name among their containers' ports. A name with
no ready endpoint is left as it is (the runner's connection then fails, as a Service
without endpoints refuses). Resolution happens once per container start, not per
connection: a pod replaced behind the Service is seen by the next start.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from local.podspec import VolumeSource

from .kube import Kube

Obj = dict[str, Any]
CONTRACT_KEY = "contract.json"
SERVICE_HOST = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)?"
    r"(?P<name>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<ns>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"\.svc(\.[a-z0-9.-]*[a-z0-9])?(:(?P<port>\d+))?(?![\w.-])"
)
DEFAULT_PORTS = {"http://": 80, "https://": 443}
Resolve = Callable[[str, str, int | None], "tuple[str, int] | None"]


class AddressPool:
    """Loopback addresses for pods, one per uid, unique within this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, str] = {}

    def claim(self, uid: str) -> str:
        with self._lock:
            if uid in self._by_uid:
                return self._by_uid[uid]
            taken = set(self._by_uid.values())
            for attempt in range(1000):
                address = pod_address(f"{uid}/{attempt}")
                if address not in taken:
                    self._by_uid[uid] = address
                    return address
        raise RuntimeError("no free loopback address for a pod")

    def release(self, uid: str) -> None:
        with self._lock:
            self._by_uid.pop(uid, None)


POOL = AddressPool()  # the machine's loopback network, shared by every agent of this process


def pod_address(seed: str) -> str:
    """An address in 127.1.0.1 to 127.254.255.254 for `seed` (never 127.0.x.x, the host's)."""
    digest = hashlib.sha256(seed.encode()).digest()
    a = 1 + digest[0] % 254
    b = digest[1]
    c = 1 + digest[2] % 254
    return f"127.{a}.{b}.{c}"


class ServiceResolver:
    """A Service's name → a ready endpoint's address and port, read from the API."""

    def __init__(self, kube: Kube) -> None:
        self._core: Any = kube.core
        self._discovery: Any = client.DiscoveryV1Api(kube.api)

    def resolve(self, name: str, namespace: str, port: int | None) -> tuple[str, int] | None:
        """(address, target port) of a ready endpoint for the Service port `port` (None:
        the Service's only port), or None when there is none."""
        service = _read(lambda: self._core.read_namespaced_service(name, namespace, **RAW))
        if service is None:
            return None
        ports = (service.get("spec") or {}).get("ports") or []
        chosen = [p for p in ports if port is None or p.get("port") == port]
        if len(chosen) != 1:
            return None
        return self._from_slices(name, namespace, chosen[0]) or self._from_pods(service, chosen[0])

    def _from_slices(self, name: str, namespace: str, port: Obj) -> tuple[str, int] | None:
        selector = f"kubernetes.io/service-name={name}"
        listed = _read(
            lambda: self._discovery.list_namespaced_endpoint_slice(
                namespace, label_selector=selector, **RAW
            )
        )
        if listed is None:  # no EndpointSlice API here (the emulator)
            return None
        for item in listed.get("items") or []:
            number = next(
                (p["port"] for p in item.get("ports") or [] if p.get("name") == port.get("name")),
                None,
            )
            for endpoint in item.get("endpoints") or []:
                if (endpoint.get("conditions") or {}).get("ready") and number is not None:
                    return str(endpoint["addresses"][0]), int(number)
        return None

    def _from_pods(self, service: Obj, port: Obj) -> tuple[str, int] | None:
        selector = (service.get("spec") or {}).get("selector") or {}
        if not selector:
            return None
        namespace = service["metadata"]["namespace"]
        labels = ",".join(f"{k}={v}" for k, v in selector.items())
        listed = _read(
            lambda: self._core.list_namespaced_pod(namespace, label_selector=labels, **RAW)
        )
        for pod in (listed or {}).get("items") or []:
            status = pod.get("status") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            target = target_port(pod, port.get("targetPort", port.get("port")))
            if ready and status.get("podIP") and target is not None:
                return str(status["podIP"]), target
        return None


RAW = {"_preload_content": False}


def _read(call: Callable[[], Any]) -> Obj | None:
    try:
        answer = call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    data: Obj = json.loads(answer.data or b"{}")
    return data


def target_port(pod: Obj, target: int | str | None) -> int | None:
    """A Service's targetPort in `pod`: a number, or a container port's name (any container,
    as the EndpointSlice controller looks it up)."""
    if isinstance(target, int):
        return target
    for container in pod["spec"].get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target:
                return int(port["containerPort"])
    return None


def rewrite_services(text: str, *, namespace: str, resolve: Resolve) -> str:
    """`text` with each Service host (and port) replaced by a ready endpoint's address."""

    def replace(match: re.Match[str]) -> str:
        scheme = match["scheme"] or ""
        port = int(match["port"]) if match["port"] else DEFAULT_PORTS.get(scheme)
        found = resolve(match["name"], match["ns"] or namespace, port)
        if found is None:
            return match[0]
        return f"{scheme}{found[0]}:{found[1]}"

    return SERVICE_HOST.sub(replace, text)


class ResolvingSource:
    """A VolumeSource whose runner contracts name pod addresses instead of Services."""

    def __init__(self, inner: VolumeSource, *, namespace: str, resolve: Resolve) -> None:
        self._inner, self._namespace, self._resolve = inner, namespace, resolve

    def config_map(self, name: str) -> Mapping[str, str] | None:
        data = self._inner.config_map(name)
        if data is None or CONTRACT_KEY not in data:
            return data
        text = rewrite_services(
            data[CONTRACT_KEY], namespace=self._namespace, resolve=self._resolve
        )
        return {**data, CONTRACT_KEY: text}

    def secret(self, name: str) -> Mapping[str, bytes] | None:
        return self._inner.secret(name)

    def service_account_token(
        self, pod: dict[str, Any], *, audience: str | None, seconds: int
    ) -> str:
        return self._inner.service_account_token(pod, audience=audience, seconds=seconds)
