"""Delete semantics: propagation policies, preconditions, finalizers, graceful pods.

Deleting only marks an object (deletionTimestamp, plus the `orphan` or
`foregroundDeletion` finalizer for those policies) unless nothing holds it; the
garbage collector (gc.py) and the kubelet finish the job, as on a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import conflict, invalid_object, not_supported
from .options import DeleteOptions, Request
from .registry import ResourceType
from .store import Obj, Store

POLICIES = {"orphan": "Orphan", "foregroundDeletion": "Foreground"}  # GC finalizer -> policy
JOB_ORPHAN_WARNING = (
    "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background "
    "to remove them or set propagationPolicy=Orphan to suppress this warning"
)


class DeletionMixin:
    """The delete verb of Api."""

    store: Store
    on_pod_graceful_delete: Callable[[Obj], bool]

    def present(self, rt: ResourceType, obj: Obj) -> Obj:
        raise NotImplementedError

    def _now(self) -> str:
        raise NotImplementedError

    def _current(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        raise NotImplementedError

    def _spec_finalizers(self, obj: Obj) -> list[str]:
        raise NotImplementedError

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        opts: DeleteOptions | None = None,
        req: Request | None = None,
    ) -> tuple[Obj, bool]:
        """Delete; returns (object, deleted_now). Not deleted now = finalizers pending."""
        opts = opts or DeleteOptions()
        req = req or Request()
        with self.store.lock:
            old = self._current(rt, namespace, name)
            self._check_preconditions(rt, old, opts)
            policy = opts.propagation or rt.default_propagation
            if opts.propagation is None and rt.plural == "jobs" and rt.group == "batch":
                req.warnings.append(JOB_ORPHAN_WARNING)
            if policy not in ("Background", "Foreground", "Orphan"):
                raise invalid_object(
                    "DeleteOptions",
                    "",
                    "",
                    [
                        not_supported(
                            "propagationPolicy", policy, ["Foreground", "Background", "Orphan"]
                        )
                    ],
                )
            if req.dry_run:
                return self.present(rt, old), False
            return self._delete_locked(rt, old, opts)

    def _check_preconditions(self, rt: ResourceType, old: Obj, opts: DeleteOptions) -> None:
        """As the registry's rest.BeforeDelete: a Conflict naming the kind, not the resource."""
        meta = old["metadata"]
        if opts.precondition_uid and opts.precondition_uid != meta["uid"]:
            raise conflict(
                rt.kind,
                rt.group,
                meta["name"],
                f"the UID in the precondition ({opts.precondition_uid}) does not match the UID "
                f"in record ({meta['uid']}). The object might have been deleted and then recreated",
            )
        if opts.precondition_rv and opts.precondition_rv != meta["resourceVersion"]:
            raise conflict(
                rt.kind,
                rt.group,
                meta["name"],
                f"the ResourceVersion in the precondition ({opts.precondition_rv}) does not match "
                f"the ResourceVersion in record ({meta['resourceVersion']}). "
                "The object might have been modified",
            )

    def _delete_locked(self, rt: ResourceType, old: Obj, opts: DeleteOptions) -> tuple[Obj, bool]:
        meta = old["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        pending = meta.get("deletionGracePeriodSeconds") and opts.grace_period != 0
        if deleting and (pending or self._spec_finalizers(old)):
            # A pending graceful pod deletion or namespace cleanup: options change nothing.
            return self.present(rt, old), False
        finalizers = gc_finalizers(
            meta.get("finalizers") or [], opts.propagation, rt.default_propagation
        )
        graceful = (
            not deleting
            and rt.plural == "pods"
            and not rt.group
            and opts.grace_period != 0
            and self.on_pod_graceful_delete(old)
        )
        if not finalizers and not graceful and not self._spec_finalizers(old):
            removed = self.store.remove(rt.key, meta.get("namespace", ""), meta["name"])
            return self.present(rt, removed or old), True
        # Stored objects are never changed in place: new top level and metadata, the
        # rest shared with old (and a new status for namespaces, below).
        new = {**old, "metadata": dict(old["metadata"])}
        nmeta = new["metadata"]
        nmeta["finalizers"] = finalizers
        if not finalizers:
            del nmeta["finalizers"]
        if deleting:  # a later DELETE still swaps the orphan/foregroundDeletion finalizer
            if opts.grace_period == 0:
                nmeta["deletionGracePeriodSeconds"] = 0
            if new == old:
                return self.present(rt, old), False
            return self.present(rt, self.store.put(rt.key, new)), False
        nmeta["deletionTimestamp"] = self._now()
        nmeta["deletionGracePeriodSeconds"] = (
            0
            if not graceful
            else (opts.grace_period or int(old["spec"].get("terminationGracePeriodSeconds", 30)))
        )
        if rt.has_generation:
            nmeta["generation"] = int(nmeta.get("generation", 1)) + 1
        if rt.plural == "namespaces":
            new["status"] = {**new.get("status", {}), "phase": "Terminating"}
        return self.present(rt, self.store.put(rt.key, new)), False


def gc_finalizers(finalizers: list[str], explicit: str | None, default: str) -> list[str]:
    """The finalizers a DELETE leaves (apiserver deletionFinalizersForGarbageCollection).

    An explicit policy replaces any `orphan`/`foregroundDeletion` finalizer; without
    one, such a finalizer already on the object wins over the resource's default.
    An unchanged set keeps the original list (and order), so nothing is written.
    """
    policy = explicit or next((POLICIES[f] for f in finalizers if f in POLICIES), default)
    out = [f for f in finalizers if f not in POLICIES]
    out += [f for f, p in POLICIES.items() if p == policy]
    return list(finalizers) if set(out) == set(finalizers) else out
