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
            old_refs = ((event.old or {}).get("metadata") or {}).get("ownerReferences")
            if refs and (event.type == "ADDED" or refs != old_refs):
                keys.append(f"dep:{event.key}|{meta.get('namespace', '')}|{meta['name']}")
            # A blocking reference removed or unblocked may let a foreground owner finish
            # (versions share unchanged references, so most events skip the comparison).
            if meta.get("ownerReferences") is not old_refs:
                unblocked = _blocking_uids(event.old) - _blocking_uids(obj)
                keys += [f"owner:{uid}" for uid in unblocked]
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
        """Let each dependent's check decide its fate; finish once none blocks any more.

        As in the real GC, a dependent with another live owner is only unlinked
        from this owner, never deleted; only references with blockOwnerDeletion
        make the owner wait.
        """
        uid = owner["metadata"]["uid"]
        for res, dep in deps:
            self._check_dependent(res, dep)
        if not any(_blocks(dep, uid) for _, dep in self.store.dependents(uid)):
            self._remove_finalizer(owner_key, owner, "foregroundDeletion")

    def _check_dependent(self, res: str, dep: Obj) -> None:
        """attemptToDeleteItem: collect a dependent none of whose owners still wants it.

        With a live ("solid") owner left, references to missing owners and to
        owners deleting in foreground are removed instead, so those can finish.
        """
        if dep["metadata"].get("deletionTimestamp"):
            return  # already on its way out; its own dependents are handled as its owner's
        solid, waiting, dangling = self._classify(dep)
        if solid:
            if waiting or dangling:
                self._drop_refs(res, dep, waiting | dangling)
        elif waiting or dangling:
            self._delete(res, dep, self._policy_for(dep, waiting))

    def _classify(self, dep: Obj) -> tuple[bool, set[str], set[str]]:
        """(any solid owner, uids waiting for dependents' deletion, dangling uids)."""
        solid, waiting, dangling = False, set(), set()
        for ref in dep["metadata"].get("ownerReferences") or []:
            uid = ref.get("uid", "")
            owner = self.store.by_uid(uid)
            if owner is None or not self._same_scope(dep, owner):
                dangling.add(uid)
            elif _deleting_dependents(owner):
                waiting.add(uid)
            else:
                solid = True
        return solid, waiting, dangling

    def _policy_for(self, dep: Obj, waiting: set[str]) -> str:
        """Foreground only for a dependent that has dependents of its own and a waiting
        owner; else its own orphan/foregroundDeletion finalizer, else Background."""
        meta = dep["metadata"]
        if waiting and self.store.dependents(meta["uid"]):
            return "Foreground"
        fins = meta.get("finalizers") or []
        if "orphan" in fins:
            return "Orphan"
        return "Foreground" if "foregroundDeletion" in fins else "Background"

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


def _deleting_dependents(obj: Obj) -> bool:
    meta = obj["metadata"]
    return bool(meta.get("deletionTimestamp")) and "foregroundDeletion" in (
        meta.get("finalizers") or []
    )


def _blocking_uids(obj: Obj | None) -> set[str]:
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return {r.get("uid", "") for r in refs if r.get("blockOwnerDeletion")}


def _blocks(dep: Obj, owner_uid: str) -> bool:
    return owner_uid in _blocking_uids(dep)
