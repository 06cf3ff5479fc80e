"""An in-memory, recording `ports.Cluster` for reconciler unit tests.

It does what the reconciler relies on and nothing more: objects by kind and
name, AlreadyExists on create, resourceVersions, merge/JSON patches, deletes,
events. Behaviour that depends on real API semantics (generation, watches,
garbage collection) is tested on the emulator instead.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from controller.core.ports import ApiError, Children, EventType, Kind, Obj

WRITE_VERBS = ("create", "patch", "patch_status", "delete", "event")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """The subset of RFC 6902 the controller sends: add/replace/remove."""
    out = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = out
        for part in parts[:-1]:
            parent = parent[part]
        if op["op"] == "remove":
            del parent[parts[-1]]
        else:
            parent[parts[-1]] = copy.deepcopy(op["value"])
    return out


class FakeCluster:
    """Objects in dicts; every call recorded in `calls` as (verb, kind, name)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.events: list[tuple[str, str, str]] = []
        self.fail: dict[str, ApiError] = {}
        self.logs: dict[str, str] = {}  # pod name -> its runner's output
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)

    # -- test helpers ----------------------------------------------------------------------
    def put(self, kind: str, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uid)}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(kind, meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found else None

    def writes(self) -> list[tuple[str, str, str]]:
        return [c for c in self.calls if c[0] in WRITE_VERBS]

    def _check(self, verb: str, kind: str = "") -> None:
        """Raise the failure set for `verb` or for `"verb Kind"`, once."""
        for key in (f"{verb} {kind}", verb):
            if key in self.fail:
                raise self.fail.pop(key)

    # -- ports.Cluster -------------------------------------------------------------------------
    def get_run(self, namespace: str, name: str) -> Obj | None:
        return self.get("InferenceRun", namespace, name)

    def get_config(self, namespace: str, name: str) -> Obj | None:
        return self.get("InferenceConfig", namespace, name)

    def children(self, namespace: str, run_name: str) -> Children:
        mine = [
            (kind, copy.deepcopy(obj))
            for (kind, ns, _), obj in self.objects.items()
            if ns == namespace
            and (obj["metadata"].get("annotations") or {}).get("longrun.dev/run") == run_name
        ]
        jobs = [o for k, o in mine if k == "Job"]
        return Children(
            config_map=next((o for k, o in mine if k == "ConfigMap"), None),
            job=next(
                (j for j in jobs if j["metadata"]["ownerReferences"][0]["kind"] == "InferenceRun"),
                None,
            ),
            cron_job=next((o for k, o in mine if k == "CronJob"), None),
            jobs=[j for j in jobs if j["metadata"]["ownerReferences"][0]["kind"] == "CronJob"],
            pods=[o for k, o in mine if k == "Pod"],
        )

    def job_pods(self, namespace: str, job_name: str) -> list[Obj]:
        self.calls.append(("list", "Pod", job_name))
        # Live, not through the cache (`children`), as the real adapter does.
        return [
            copy.deepcopy(obj)
            for (kind, ns, _), obj in self.objects.items()
            if kind == "Pod"
            and ns == namespace
            and obj["metadata"]["labels"].get("batch.kubernetes.io/job-name") == job_name
        ]

    def pod_log(
        self, namespace: str, name: str, *, container: str, tail_lines: int, limit_bytes: int
    ) -> str:
        self.calls.append(("log", "Pod", name))
        self._check("log")
        if ("Pod", namespace, name) not in self.objects:
            raise ApiError(404, f'pods "{name}" not found')
        lines = self.logs.get(name, "").splitlines(keepends=True)
        return "".join(lines[-tail_lines:]).encode()[:limit_bytes].decode("utf-8", "ignore")

    def read(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        self.calls.append(("read", kind, name))
        return self.get(kind, namespace, name)

    def create(self, kind: Kind, body: Obj) -> Obj:
        meta = body["metadata"]
        self.calls.append(("create", kind, meta["name"]))
        self._check("create", kind)
        if (kind, meta["namespace"], meta["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists")
        return self.put(kind, body)

    def patch(self, kind: Kind, namespace: str, name: str, body: Obj | list[Obj]) -> Obj:
        self.calls.append(("patch", kind, name))
        self._check("patch")
        current = self.objects[(kind, namespace, name)]
        updated = json_patch(current, body) if isinstance(body, list) else merge(current, body)
        return self.put(kind, updated)

    def patch_status(
        self, namespace: str, name: str, status: Obj, *, kind: str = "InferenceRun"
    ) -> Obj:
        self.calls.append(("patch_status", kind, name))
        self._check("patch_status")
        current = self.objects[(kind, namespace, name)]
        return self.put(kind, merge(current, {"status": status}))

    def delete(self, kind: Kind, namespace: str, name: str, *, uid: str) -> None:
        self.calls.append(("delete", kind, name))
        self.objects.pop((kind, namespace, name), None)

    def emit_event(self, run: Obj, *, type_: EventType, reason: str, message: str) -> None:
        self.calls.append(("event", reason, run["metadata"]["name"]))
        self.events.append((type_, reason, message))
