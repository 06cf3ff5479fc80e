"""The node half of a kubelet: a Ready Node, and the heartbeats that keep it Ready.

Why both heartbeats: kube-controller-manager's node lifecycle controller marks a
node `Unknown` once neither its Lease in `kube-node-lease` was renewed nor its
Ready condition's `lastHeartbeatTime` moved within the grace period, taints it
`node.kubernetes.io/unreachable:NoExecute`, and the taint-eviction controller then
deletes its pods. So the agent renews the Lease every `renew_seconds` (a kubelet:
10 s of a 40 s lease) and refreshes the Ready condition on the same beat.
"""

from __future__ import annotations

import logging
import platform
import threading
from typing import Any

from .config import AgentConfig
from .kube import NODE_LEASE_NAMESPACE, ApiError, Kube
from .status import micro_time, rfc3339

Obj = dict[str, Any]
log = logging.getLogger(__name__)
AGENT_VERSION = "v0.1.0-longrun-nodeagent"
PRESSURES = ("MemoryPressure", "DiskPressure", "PIDPressure")
HOST_IP = "127.0.0.1"


def node_conditions(*, now: str, since: str) -> list[Obj]:
    """Ready (since `since`) and no pressure, each heartbeat at `now`."""
    out = [
        _node_condition(
            kind,
            ok=False,
            reason=f"KubeletHasNo{kind}",
            message=f"kubelet has no {kind.removesuffix('Pressure').lower()} pressure",
        )
        for kind in PRESSURES
    ]
    ready = "kubelet is posting ready status (longrun node agent)"
    out.append(_node_condition("Ready", ok=True, reason="KubeletReady", message=ready))
    return [{**c, "lastHeartbeatTime": now, "lastTransitionTime": since} for c in out]


def _node_condition(type_: str, *, ok: bool, reason: str, message: str) -> Obj:
    status = "True" if ok else "False"
    return {"type": type_, "status": status, "reason": reason, "message": message}


def node_manifest(config: AgentConfig, *, now: str, kubelet_port: int = 0) -> Obj:
    """The Node a kubelet registers, Ready at once (pods are bound to it, never scheduled);
    `kubelet_port` is where its log server listens (0: none)."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    capacity = dict(config.capacity)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": config.node_name,
            "labels": {
                "kubernetes.io/hostname": config.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": arch,
                "longrun.dev/node-agent": "true",
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": node_conditions(now=now, since=now),
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": config.hostname},
            ],
            "daemonEndpoints": daemon_endpoints(kubelet_port),
            "nodeInfo": _node_info(arch),
        },
    }


def daemon_endpoints(kubelet_port: int) -> Obj:
    """Where kube-apiserver finds the kubelet (`Port` is capitalised in the API)."""
    return {"kubeletEndpoint": {"Port": kubelet_port}}


def _node_info(arch: str) -> Obj:
    return {
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
        "kernelVersion": platform.release(),
        "osImage": platform.platform(),
        "containerRuntimeVersion": f"local-process://{AGENT_VERSION}",
        "kubeletVersion": AGENT_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": arch,
    }


def lease_manifest(config: AgentConfig, node: Obj, *, now: str) -> Obj:
    """The node's Lease, owned by the Node (the garbage collector removes it with the node)."""
    meta = node["metadata"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": config.node_name,
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": {
            "holderIdentity": config.node_name,
            "leaseDurationSeconds": config.lease_seconds,
            "renewTime": now,
        },
    }


def ready_since(node: Obj, *, now: str) -> str:
    """When the node became Ready: kept from the stored Ready condition when it is True."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return str(cond.get("lastTransitionTime") or now)
    return now


class Heartbeat:
    """Registers the Node and its Lease, then renews both on a thread until stopped."""

    def __init__(self, kube: Kube, config: AgentConfig) -> None:
        self.kube = kube
        self.config = config
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease: Obj | None = None
        self._since = ""
        self.kubelet_port = 0  # set by the agent once its log server listens

    def register(self) -> Obj:
        """Create the Node (or mark an existing one Ready again) and its Lease."""
        now = self._now()
        node = self.kube.get_node(self.config.node_name)
        if node is None:
            manifest = node_manifest(self.config, now=now, kubelet_port=self.kubelet_port)
            node = self.kube.create_node(manifest)
        self._since = ready_since(node, now=now)
        node = self._post_status(now)  # a create may drop status (the emulator does)
        self._renew_lease(node)
        return node

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.config.renew_seconds):
            try:
                self.beat()
            except ApiError as exc:  # the next beat tries again; the grace period is 4 beats
                log.warning("node heartbeat failed: %s", exc)

    def beat(self) -> None:
        """Renew the Lease and refresh the Node's conditions (re-registering a deleted Node)."""
        try:
            node = self._post_status(self._now())
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = self.register()
        self._renew_lease(node)

    def _post_status(self, now: str) -> Obj:
        config = self.config
        status = {
            "capacity": dict(config.capacity),
            "allocatable": dict(config.capacity),
            "conditions": node_conditions(now=now, since=self._since),
            "addresses": node_manifest(config, now=now)["status"]["addresses"],
            "daemonEndpoints": daemon_endpoints(self.kubelet_port),
        }
        return self.kube.patch_node_status(config.node_name, {"status": status})

    def _renew_lease(self, node: Obj) -> None:
        """PUT the Lease with a new renewTime; on a conflict or a missing Lease, read or
        create it and try once more."""
        now = micro_time(self.config.now())
        for _ in range(2):
            lease = self._lease or self.kube.get_lease(self.config.node_name)
            try:
                if lease is None:
                    self._lease = self.kube.create_lease(lease_manifest(self.config, node, now=now))
                else:
                    spec = {**lease["spec"], "holderIdentity": self.config.node_name}
                    spec.update(renewTime=now, leaseDurationSeconds=self.config.lease_seconds)
                    self._lease = self.kube.replace_lease({**lease, "spec": spec})
                return
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
                self._lease = None

    def _now(self) -> str:
        return rfc3339(self.config.now())
