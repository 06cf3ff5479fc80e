"""The node side: schedule pods onto one fake node and run them via the executor.

Pods created by anyone (the Job controller, a test, kubectl) are bound to node
`emulator-node` and handed to the PodExecutor. Status written back follows the
kubelet's shape (phase, conditions, containerStatuses with
`state.terminated.message` holding the termination message), because
controllers read exactly those fields. Deleting a running pod is graceful: the
pod gets a deletionTimestamp, the executor is told to kill it, and the pod object
disappears once it reports termination (or the grace period runs out).
"""

from __future__ import annotations

import threading
from typing import Any

from .api import Api
from .clock import Timers, rfc3339
from .codec import clone
from .executors import PodExecutor
from .manager import Manager
from .patch import MERGE_PATCH
from .store import Event

Obj = dict[str, Any]
NODE_NAME = "emulator-node"


class _Handle:
    """PodHandle implementation writing through the pods/status subresource."""

    def __init__(self, kubelet: Kubelet, pod: Obj, ip: str) -> None:
        self._kubelet = kubelet
        self._pod = clone(pod)
        self._lock = threading.Lock()
        self._started = ""
        self._ip = ip
        self._states: dict[str, Obj] = {}
        self.terminated = False
        self.killing = False

    @property
    def pod(self) -> Obj:
        return self._pod

    def _containers(self) -> list[Obj]:
        return self._pod["spec"].get("containers") or []

    def set_running(self) -> None:
        with self._lock:
            if self.terminated:
                return
            now = self._kubelet.now()
            self._started = now
            for c in self._containers():
                self._states[c["name"]] = {"running": {"startedAt": now}}
            self._write("Running", ready=True)

    def set_terminated(
        self,
        exit_code: int,
        *,
        message: str = "",
        reason: str | None = None,
        container: str | None = None,
    ) -> None:
        with self._lock:
            if self.terminated:
                return
            now = self._kubelet.now()
            started = self._started or now
            for c in self._containers():
                if container in (None, c["name"]):
                    state: Obj = {
                        "exitCode": exit_code,
                        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                        "startedAt": started,
                        "finishedAt": now,
                        "containerID": f"emulator://{self._pod['metadata']['uid']}/{c['name']}",
                    }
                    if message:
                        state["message"] = message
                    self._states[c["name"]] = {"terminated": state}
            done = all("terminated" in self._states.get(c["name"], {}) for c in self._containers())
            if not done:
                self._write("Running", ready=False)
                return
            self.terminated = True
            codes = [self._states[c["name"]]["terminated"]["exitCode"] for c in self._containers()]
            self._write("Succeeded" if all(code == 0 for code in codes) else "Failed", ready=False)
        self._kubelet.terminated(self._pod)

    def add_condition(
        self, type_: str, *, status: str = "True", reason: str = "", message: str = ""
    ) -> None:
        cond = {
            "type": type_,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": self._kubelet.now(),
            "reason": reason,
            "message": message,
        }
        self._kubelet.patch_status(self._pod, {"conditions": [cond]}, merge_conditions=True)

    def append_log(self, text: str) -> None:
        self._kubelet.append_log(self._pod, text)

    def _write(self, phase: str, *, ready: bool) -> None:
        now = self._kubelet.now()
        statuses = []
        for c in self._containers():
            state = self._states.get(c["name"], {"waiting": {"reason": "ContainerCreating"}})
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"emulator://{self._pod['metadata']['uid']}/{c['name']}",
                    "ready": ready and "running" in state,
                    "started": "running" in state,
                    "restartCount": 0,
                    "lastState": {},
                    "state": state,
                }
            )
        terminal = phase in ("Succeeded", "Failed")
        why = "PodCompleted" if terminal else ("" if ready else "ContainersNotReady")
        status = {
            "phase": phase,
            "startTime": self._started or now,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self._ip,
            "podIPs": [{"ip": self._ip}],
            "containerStatuses": statuses,
            "conditions": [
                _cond("PodReadyToStartContainers", not terminal, now),
                _cond("Initialized", True, now),
                _cond("Ready", ready, now, why),
                _cond("ContainersReady", ready, now, why),
                _cond("PodScheduled", True, now),
            ],
        }
        self._kubelet.patch_status(self._pod, status, merge_conditions=True)


def _cond(type_: str, ok: bool, now: str, reason: str = "") -> Obj:
    cond: Obj = {
        "type": type_,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if reason and not ok:
        cond["reason"] = reason
    return cond


class Kubelet:
    """Controller that starts new pods on the executor and kills deleted ones."""

    name = "kubelet"

    def __init__(self, api: Api, *, manager: Manager, timers: Timers, executor: PodExecutor):
        self.api = api
        self.manager = manager
        self.timers = timers
        self.executor = executor
        self._handles: dict[str, _Handle] = {}
        self._logs: dict[tuple[str, str], list[str]] = {}
        self._lock = threading.Lock()
        self._ips = 0
        api.on_pod_graceful_delete = self.graceful_delete

    def now(self) -> str:
        return rfc3339(self.api.clock.now())

    def keys_for(self, event: Event) -> list[str]:
        if event.key != "pods":
            return []
        meta = event.obj["metadata"]
        if event.type == "ADDED":
            return [f"start:{meta['namespace']}/{meta['name']}"]
        if event.type == "DELETED":
            return [f"gone:{meta['uid']}"]
        if meta.get("deletionTimestamp") and not (event.old or {}).get("metadata", {}).get(
            "deletionTimestamp"
        ):
            return [f"kill:{meta['uid']}"]  # the kubelet stops pods once they are deleting
        return []

    def reconcile(self, key: str) -> None:
        verb, _, rest = key.partition(":")
        if verb == "start":
            ns, _, name = rest.partition("/")
            self._start(ns, name)
        elif verb == "kill":
            pod = self.api.store.by_uid(rest)
            grace = int((pod or {}).get("metadata", {}).get("deletionGracePeriodSeconds") or 0)
            self._kill(rest, grace=grace, forget=False)
        elif verb == "gone":
            self._kill(rest, grace=0, forget=True)

    def _kill(self, uid: str, *, grace: int, forget: bool) -> None:
        """Tell the executor to stop the pod (once); after `grace` clock-seconds, force it."""
        with self._lock:
            handle = self._handles.pop(uid, None) if forget else self._handles.get(uid)
            if handle is None or handle.terminated or handle.killing:
                return
            handle.killing = True
        self.executor.kill(handle.pod, handle, grace_seconds=grace)
        self.timers.call_later(grace, lambda: handle.set_terminated(137, reason="Error"))

    def _start(self, ns: str, name: str) -> None:
        pod = self.api.store.get("pods", ns, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        if (pod.get("status") or {}).get("phase") not in (None, "Pending"):
            return
        with self._lock:
            if pod["metadata"]["uid"] in self._handles:
                return
            self._ips += 1
            handle = _Handle(self, pod, f"10.244.{self._ips // 250}.{self._ips % 250 + 2}")
            self._handles[pod["metadata"]["uid"]] = handle
        self._bind(pod)
        self.executor.start(handle.pod, handle)

    def _bind(self, pod: Obj) -> None:
        """The scheduler's binding: spec.nodeName (a system write, like pods/binding)."""
        with self.api.store.lock:
            cur = self.api.store.get("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
            if cur is None or cur["metadata"]["uid"] != pod["metadata"]["uid"]:
                return
            # Stored objects are never changed in place: new dicts on the path written.
            meta = dict(cur["metadata"])
            new = {**cur, "metadata": meta, "spec": {**cur["spec"], "nodeName": NODE_NAME}}
            self.api.store.put("pods", new)

    def patch_status(self, pod: Obj, status: Obj, *, merge_conditions: bool) -> None:
        """Write pod status, keeping conditions not mentioned (e.g. DisruptionTarget)."""
        rt = self.api.registry.get("", "v1", "pods")
        assert rt is not None
        meta = pod["metadata"]
        with self.api.store.lock:
            cur = self.api.store.get("pods", meta["namespace"], meta["name"])
            if cur is None or cur["metadata"]["uid"] != meta["uid"]:
                return
            new_status = {**(cur.get("status") or {}), **status}
            if merge_conditions:
                mine = {c["type"]: c for c in status.get("conditions", [])}
                kept = [
                    c
                    for c in (cur.get("status") or {}).get("conditions", [])
                    if c["type"] not in mine
                ]
                new_status["conditions"] = kept + list(mine.values())
            patch = {"metadata": {"uid": meta["uid"]}, "status": new_status}
            self.api.patch(
                rt,
                meta["namespace"],
                meta["name"],
                patch,
                content_type=MERGE_PATCH,
                subresource="status",
            )

    def terminated(self, pod: Obj) -> None:
        with self._lock:
            self._handles.pop(pod["metadata"]["uid"], None)

    def graceful_delete(self, pod: Obj) -> bool:
        """Called by the API (under the store lock) when a pod is deleted gracefully."""
        with self._lock:
            handle = self._handles.get(pod["metadata"]["uid"])
        # Running pods stay until they stop; the deletionTimestamp event makes reconcile() kill it.
        return handle is not None and not handle.terminated

    def append_log(self, pod: Obj, text: str) -> None:
        with self._lock:
            self._logs.setdefault(
                (pod["metadata"]["namespace"], pod["metadata"]["name"]), []
            ).append(text)

    def logs(
        self,
        namespace: str,
        name: str,
        *,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        """A pod's output as `GET pods/<name>/log` serves it: the last `tail_lines` lines, then
        at most `limit_bytes` bytes counted from the first of them (the kubelet's order)."""
        with self._lock:
            text = "".join(self._logs.get((namespace, name), []))
        if tail_lines is not None:
            text = "".join(text.splitlines(keepends=True)[-tail_lines:]) if tail_lines > 0 else ""
        if limit_bytes is not None:
            text = text.encode()[:limit_bytes].decode("utf-8", "ignore")
        return text


def log_options(query: dict[str, str]) -> dict[str, int | None]:
    """`tailLines` and `limitBytes` of a log request, as `Kubelet.logs` takes them."""

    def number(key: str) -> int | None:
        value = query.get(key)
        return int(value) if value and value.lstrip("-").isdigit() else None

    return {"tail_lines": number("tailLines"), "limit_bytes": number("limitBytes")}
