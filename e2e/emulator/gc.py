"""Garbage collector, namespace cleanup and CRD cleanup controllers.

These are what make deletion cascade on a real cluster: ownerReferences
(Background/Foreground/Orphan propagation, `blockOwnerDeletion`, the
`foregroundDeletion` and `orphan` finalizers), namespaces in `Terminating` that
empty themselves, and CRDs that delete their custom resources before leaving.
"""

from __future__ import annotations

from typing import Any

from .api import Api
from .crd import CLEANUP_FINALIZER
from .options import DeleteOptions
from .patch import MERGE_PATCH
from .store import Event

Obj = dict[str, Any]
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"


class GarbageCollector:
    """Owner-reference garbage collection plus namespace/CRD content cleanup."""

    name = "gc"

    def __init__(self, api: Api) -> None:
        self.api = api
        self.store = api.store

    # -- event routing -------------------------------------------------------------
    def keys_for(self, event: Event) -> list[str]:
        obj = event.obj
        meta = obj["metadata"]
        keys: list[str] = []
        refs = meta.get("ownerReferences") or []
        if event.type == "DELETED":
            keys.append(f"owner:{meta['uid']}")
            keys += [f"owner:{r.get('uid')}" for r in refs]
            keys += self._cleanup_keys(event)
        else:
            if meta.get("deletionTimestamp"):
                keys.append(f"owner:{meta['uid']}")
                if event.key == "namespaces":
                    keys.append(f"ns:{meta['name']}")
                if event.key == CRD_KEY:
                    keys.append(f"crd:{meta['name']}")
            if refs and event.type == "ADDED":
                keys.append(f"dep:{event.key}|{meta.get('namespace', '')}|{meta['name']}")
        return keys

    def _cleanup_keys(self, event: Event) -> list[str]:
        ns = event.namespace
        out = []
        if ns:
            owner_ns = self.store.get("namespaces", "", ns)
            if owner_ns is not None and owner_ns["metadata"].get("deletionTimestamp"):
                out.append(f"ns:{ns}")
        crd = self.store.get(CRD_KEY, "", event.key)
        if crd is not None and crd["metadata"].get("deletionTimestamp"):
            out.append(f"crd:{event.key}")
        return out

    def reconcile(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        if kind == "owner":
            self._owner(rest)
        elif kind == "dep":
            res, ns, name = rest.split("|")
            obj = self.store.get(res, ns, name)
            if obj is not None:
                self._check_dependent(res, obj)
        elif kind == "ns":
            self._namespace(rest)
        elif kind == "crd":
            self._crd(rest)

    # -- owner references ------------------------------------------------------------
    def _owner(self, uid: str) -> None:
        owner = self.store.by_uid(uid)
        deps = self.store.dependents(uid)
        if owner is None:
            for res, dep in deps:
                self._check_dependent(res, dep)
            return
        finalizers = owner["metadata"].get("finalizers") or []
        if not owner["metadata"].get("deletionTimestamp"):
            return
        owner_key = self.store.key_of_uid(uid) or ""
        if "orphan" in finalizers:
            for res, dep in deps:
                self._drop_refs(res, dep, {uid})
            self._remove_finalizer(owner_key, owner, "orphan")
        elif "foregroundDeletion" in finalizers:
            self._foreground(owner_key, owner, deps)

    def _foreground(self, owner_key: str, owner: Obj, deps: list[tuple[str, Obj]]) -> None:
        uid = owner["metadata"]["uid"]
        blocking = 0
        for res, dep in deps:
            ref = next(
                r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") == uid
            )
            if ref.get("blockOwnerDeletion"):
                blocking += 1
            if not dep["metadata"].get("deletionTimestamp"):
                policy = "Foreground" if ref.get("blockOwnerDeletion") else "Background"
                self._delete(res, dep, policy)
        if blocking == 0:
            self._remove_finalizer(owner_key, owner, "foregroundDeletion")

    def _check_dependent(self, res: str, dep: Obj) -> None:
        refs = dep["metadata"].get("ownerReferences") or []
        alive, waiting, dangling = [], [], set()
        for ref in refs:
            owner = self.store.by_uid(ref.get("uid", ""))
            if owner is None or not self._same_scope(dep, owner):
                dangling.add(ref.get("uid", ""))
            elif "foregroundDeletion" in (owner["metadata"].get("finalizers") or []):
                waiting.append(ref)
            else:
                alive.append(ref)
        if alive:
            if dangling:
                self._drop_refs(res, dep, dangling)
            return
        if waiting or dangling:
            block = any(r.get("blockOwnerDeletion") for r in waiting)
            if not dep["metadata"].get("deletionTimestamp"):
                self._delete(res, dep, "Foreground" if block else "Background")

    def _same_scope(self, dep: Obj, owner: Obj) -> bool:
        owner_ns = owner["metadata"].get("namespace", "")
        return not owner_ns or owner_ns == dep["metadata"].get("namespace", "")

    # -- writes ----------------------------------------------------------------------
    def _delete(self, res: str, obj: Obj, policy: str) -> None:
        rt = self.api.registry.by_key(res)
        if rt is None:
            return
        meta = obj["metadata"]
        opts = DeleteOptions(propagation=policy, precondition_uid=meta["uid"])
        try:
            self.api.delete(rt, meta.get("namespace", ""), meta["name"], opts)
        except Exception as exc:  # NotFound / precondition: someone else was faster
            if getattr(exc, "code", None) not in (404, 409):
                raise

    def _drop_refs(self, res: str, obj: Obj, uids: set[str]) -> None:
        rt = self.api.registry.by_key(res)
        if rt is None:
            return
        meta = obj["metadata"]
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") not in uids]
        patch = {"metadata": {"ownerReferences": refs or None, "uid": meta["uid"]}}
        self.api.patch(rt, meta.get("namespace", ""), meta["name"], patch, content_type=MERGE_PATCH)

    def _remove_finalizer(self, res: str, obj: Obj, finalizer: str) -> None:
        rt = self.api.registry.by_key(res)
        if rt is None:
            return
        meta = obj["metadata"]
        fins = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {"metadata": {"finalizers": fins or None, "uid": meta["uid"]}}
        self.api.patch(rt, meta.get("namespace", ""), meta["name"], patch, content_type=MERGE_PATCH)

    # -- namespaces and CRDs -----------------------------------------------------------
    def _namespace(self, name: str) -> None:
        ns = self.store.get("namespaces", "", name)
        if ns is None or not ns["metadata"].get("deletionTimestamp"):
            return
        remaining = 0
        for res in self.store.keys():  # noqa: SIM118 (Store is not a mapping)
            rt = self.api.registry.by_key(res)
            if rt is None or not rt.namespaced:
                continue
            items, _ = self.store.snapshot(res, name)
            remaining += len(items)
            for obj in items:
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(res, obj, "Background")
        if remaining == 0:
            self.store.remove("namespaces", "", name)

    def _crd(self, name: str) -> None:
        crd = self.store.get(CRD_KEY, "", name)
        if crd is None or not crd["metadata"].get("deletionTimestamp"):
            return
        items, _ = self.store.snapshot(name)
        for obj in items:
            if not obj["metadata"].get("deletionTimestamp"):
                self._delete(name, obj, "Background")
        if not items:
            group = crd["spec"]["group"]
            self.api.registry.remove_group_resource(group, crd["spec"]["names"]["plural"])
            fins = [f for f in crd["metadata"].get("finalizers") or [] if f != CLEANUP_FINALIZER]
            if fins:
                return
            self.store.remove(CRD_KEY, "", name)
