"""The emulator's PodExecutor backed by longrun's local executor: pods really run.

`local.executor.run_pod` is what `longrun run` uses; here it runs
the pods the emulator's Job controller creates, reading their ConfigMaps and
Secrets from the emulator's store. So an e2e test exercises the same
rendering → pod → runner process → termination message path as a user's
local run, and the Job controller's retries and deadlines act on real exits.

One deviation from a cluster, the same as in `longrun run`: Secret volumes are
materialized under a per-pod directory, so the contract's `secretsDir` (the
default mount path) is pointed there when its ConfigMap is read.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from contracts.contract import DEFAULT_SECRETS_DIR
from e2e.emulator.executors import PodHandle
from local.executor import PodExit, run_pod
from local.podspec import ImageMap, local_path

Obj = dict[str, Any]
CONTRACT_KEY = "contract.json"


class StoreSource:
    """VolumeSource over the emulator's store for one pod (namespace + local root)."""

    def __init__(self, store: Any, *, namespace: str, root: Path) -> None:
        self._store = store
        self._namespace = namespace
        self._root = root

    def config_map(self, name: str) -> Mapping[str, str] | None:
        obj = self._store.get("configmaps", self._namespace, name)
        if obj is None:
            return None
        data = dict(obj.get("data") or {})
        if CONTRACT_KEY in data:
            data[CONTRACT_KEY] = self._localize(data[CONTRACT_KEY])
        return data

    def secret(self, name: str) -> Mapping[str, bytes] | None:
        obj = self._store.get("secrets", self._namespace, name)
        if obj is None:
            return None
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}

    def _localize(self, text: str) -> str:
        try:
            contract = json.loads(text)
        except ValueError:
            return text  # not ours to fix: the runner reports it (exit 2)
        if contract.get("secretsDir", DEFAULT_SECRETS_DIR) == DEFAULT_SECRETS_DIR:
            contract["secretsDir"] = str(local_path(self._root, DEFAULT_SECRETS_DIR))
        return json.dumps(contract, sort_keys=True, indent=2) + "\n"


class LocalPodExecutor:
    """PodExecutor running each pod's container spec as a local subprocess."""

    def __init__(
        self,
        *,
        store: Callable[[], Any],
        workdir: Path,
        images: ImageMap,
        cwd: Path | None = None,
    ) -> None:
        self._store = store
        self._workdir = workdir
        self._images = images
        self._cwd = cwd
        self._lock = threading.Lock()
        self._stops: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []

    def start(self, pod: Obj, handle: PodHandle) -> None:
        uid = pod["metadata"]["uid"]
        stop = threading.Event()
        thread = threading.Thread(target=self._run, args=(pod, handle, stop), name=f"pod-{uid}")
        with self._lock:
            self._stops[uid] = stop
            self._threads.append(thread)
        thread.start()

    def _run(self, pod: Obj, handle: PodHandle, stop: threading.Event) -> None:
        meta = pod["metadata"]
        root = self._workdir / meta["namespace"] / meta["name"]
        source = StoreSource(self._store(), namespace=meta["namespace"], root=root)
        handle.set_running()
        exit_: PodExit = run_pod(
            pod,
            source=source,
            root=root,
            images=self._images,
            on_line=lambda _stream, line: handle.append_log(line + "\n"),
            cwd=self._cwd,
            stop=stop,
        )
        reason = "Error" if exit_.reason == "Stopped" else exit_.reason  # the kubelet's word
        handle.set_terminated(exit_.exit_code, message=exit_.message, reason=reason)

    def kill(self, pod: Obj, handle: PodHandle, *, grace_seconds: int) -> None:
        with self._lock:
            stop = self._stops.get(pod["metadata"]["uid"])
        if stop is not None:
            stop.set()  # run_pod sends SIGTERM, then SIGKILL after the pod's grace period

    def close(self) -> None:
        with self._lock:
            stops, threads = list(self._stops.values()), list(self._threads)
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(timeout=60)
