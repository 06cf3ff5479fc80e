"""Generic resource operations with kube-apiserver semantics.

Every verb for every kind goes through here, from HTTP requests and from the
built-in controllers alike: uid/creationTimestamp/generation bookkeeping,
optimistic concurrency on resourceVersion, status-subresource separation,
schema pruning and defaulting for custom resources, finalizers and
deletionTimestamp, and deletion propagation policies (the garbage collector does
the cascading afterwards).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from . import builtin_schema, cel, events, kinds, schema
from .clock import Clock, rfc3339
from .codec import clone
from .deletion import DeletionMixin
from .errors import (
    ApiError,
    FieldError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid,
    invalid_object,
    not_found,
    qualified,
    required,
)
from .listing import ListingMixin
from .options import Request
from .patch import apply_patch
from .registry import Registry, ResourceType
from .store import Obj, Store

_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(rng: random.Random, n: int = 5) -> str:
    return "".join(rng.choice(_NAME_CHARS) for _ in range(n))


class Api(ListingMixin, DeletionMixin):
    """The emulated API server's object logic, independent of HTTP."""

    def __init__(self, *, store: Store, registry: Registry, clock: Clock, seed: int | None = None):
        self.store = store
        self.registry = registry
        self.clock = clock
        self.rng = random.Random(seed)
        # Hooks set by the emulator: CRD registration and graceful pod termination.
        self.on_crd_write: Callable[[Obj], None] = lambda _crd: None
        self.on_pod_graceful_delete: Callable[[Obj], bool] = lambda _pod: False
        # Validating admission plugins (security.Security.admit): after the object's validation.
        self.validate_admission: Callable[[ResourceType, Obj, Obj | None, Request], None] = (
            lambda _rt, _obj, _old, _req: None
        )

    # -- helpers -----------------------------------------------------------------
    def present(self, rt: ResourceType, obj: Obj) -> Obj:
        """The object as served at rt's group/version."""
        if rt.group == "events.k8s.io":
            return events.to_events_v1(obj)
        if obj.get("apiVersion") == rt.api_version and obj.get("kind") == rt.kind:
            return obj
        return {**obj, "apiVersion": rt.api_version, "kind": rt.kind}

    def _now(self) -> str:
        return rfc3339(self.clock.now())

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return self.present(rt, obj)

    # -- create ------------------------------------------------------------------
    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        req: Request | None = None,
        *,
        owned: bool = False,
    ) -> Obj:
        """Create; `owned` means the caller hands `body` over (see _decode)."""
        req = req or Request()
        obj = self._decode(rt, body, owned=owned)
        meta = obj.setdefault("metadata", {})
        self._set_namespace(rt, meta, namespace)
        with self.store.lock:
            self._check_namespace(rt, meta)
            self._assign_name(rt, meta)
            self._reset_system_fields(rt, obj)
            obj = self._admit(rt, obj, None, req)
            self.validate_admission(rt, obj, None, req)
            ns = meta.get("namespace", "")
            if self.store.get(rt.key, ns, meta["name"]) is not None:
                raise already_exists(rt.plural, rt.group, meta["name"])
            if req.dry_run:
                return self.present(rt, obj)
            stored = self.store.put(rt.key, obj)
            self._after_write(rt, stored)
            return self.present(rt, stored)

    def _decode(self, rt: ResourceType, body: Any, *, owned: bool) -> Obj:
        """The body as an object of rt, never sharing anything the caller may still change.

        A body the caller keeps (controllers, tests) is cloned. One it hands over
        (`owned`: decoded from an HTTP request just for this call, or built fresh by
        the caller, nothing in it referred to from elsewhere; or patch's result,
        which shares only immutable stored values) is used as is, with a fresh top
        level and metadata: the parts admission changes in place on every write.
        Creation's defaulting changes nested values too, so a created body must not
        contain stored values.
        """
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        obj = _fresh_top(body) if owned else clone(body)
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != rt.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        if not isinstance(obj.get("metadata", {}), dict):
            raise bad_request("metadata must be an object")
        if rt.group == "events.k8s.io":
            return events.to_core(obj)  # validated in core shape (kinds.VALIDATORS)
        return obj

    def _set_namespace(self, rt: ResourceType, meta: Obj, namespace: str) -> None:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        meta["namespace"] = namespace

    def _check_namespace(self, rt: ResourceType, meta: Obj) -> None:
        if not rt.namespaced:
            return
        namespace = meta.get("namespace", "")
        ns = self.store.get("namespaces", "", namespace)
        if ns is None:
            raise not_found("namespaces", "", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            # Admission names the object as requested (generateName when no name is given).
            name = meta.get("name") or meta.get("generateName", "")
            raise ApiError(
                403,
                f'{qualified(rt.plural, rt.group)} "{name}" is forbidden: unable to create new '
                f"content in namespace {namespace} because it is being terminated",
                details={
                    "name": name,
                    "kind": rt.plural,
                    "group": rt.group,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "field": "metadata.namespace",
                            "message": f"namespace {namespace} is being terminated",
                        }
                    ],
                },
            )

    def _assign_name(self, rt: ResourceType, meta: Obj) -> None:
        if meta.get("name"):
            return
        prefix = meta.get("generateName")
        if not prefix:
            raise invalid_object(
                rt.kind,
                rt.group,
                "",
                [required("metadata.name", "name or generateName is required")],
            )
        base = prefix[:58]
        for _ in range(10):
            name = base + random_suffix(self.rng)
            if self.store.get(rt.key, meta.get("namespace", ""), name) is None:
                meta["name"] = name
                return
        raise already_exists(rt.plural, rt.group, base)

    def _reset_system_fields(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        for key in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ):
            meta.pop(key, None)
        meta["uid"] = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = self._now()
        if rt.has_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.has_status:
            # Built-ins reset status to its zero value (`{}`); CRs drop it.
            obj.pop("status", None)
            if not rt.is_custom:
                obj["status"] = {}
        if (rt.group, rt.plural) == ("", "pods"):
            obj["status"] = {"phase": "Pending"}  # qosClass comes with the defaults

    # -- admission: prune/default/validate ---------------------------------------
    def _admit(self, rt: ResourceType, obj: Obj, old: Obj | None, req: Request) -> Obj:
        errors: list[FieldError] = []
        if rt.is_custom:
            obj = self._admit_custom(rt, obj, req, old)
        else:
            unknown: list[str] = []
            obj = builtin_schema.prune(
                rt.group, rt.plural, obj, kind=rt.kind, unknown=unknown, remember=old is not None
            )
            self._report_unknown(rt, unknown, req)
            defaulter = kinds.DEFAULTERS.get((rt.group, rt.plural))
            if defaulter and old is None:
                defaulter(obj)
            validator = kinds.VALIDATORS.get((rt.group, rt.plural))
            errors += validator(obj) if validator else []
        meta = obj["metadata"]
        if old is None:
            errors = kinds.validate_name(rt, meta["name"]) + errors
        errors += kinds.validate_metadata(meta)
        if old is not None:
            errors += kinds.validate_update(rt, obj, old)
            errors += self._finalizer_rules(obj, old)
        if errors:
            # events.k8s.io Events are validated as the internal (core) Event: no group.
            group = "" if rt.group == "events.k8s.io" else rt.group
            raise invalid_object(rt.kind, group, meta["name"], errors)
        return obj

    def _admit_custom(self, rt: ResourceType, obj: Obj, req: Request, old: Obj | None) -> Obj:
        version = rt.crd_version or {}
        sch = (version.get("schema") or {}).get("openAPIV3Schema")
        unknown: list[str] = []
        obj = schema.prune(obj, sch, unknown=unknown)
        obj["metadata"] = builtin_schema.prune_metadata(
            obj["metadata"], kind=rt.kind, unknown=unknown
        )
        self._report_unknown(rt, unknown, req)
        obj = schema.drop_nulls(obj, sch)
        obj = schema.apply_defaults(obj, sch)
        errors = schema.validate_with_rules(obj, sch, old=old if old is not None else cel.MISSING)
        if errors:
            raise invalid_object(rt.kind, rt.group, obj["metadata"].get("name", ""), errors)
        return obj

    def _report_unknown(self, rt: ResourceType, unknown: list[str], req: Request) -> None:
        """fieldValidation: Strict rejects unknown fields, Warn (default) warns, Ignore drops."""
        if unknown and req.field_validation == "Strict":
            msgs = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                f"strict decoding error: {msgs}"
            )
        if req.field_validation != "Ignore":
            req.warnings += [f'unknown field "{u}"' for u in unknown]

    def _finalizer_rules(self, new: Obj, old: Obj) -> list[FieldError]:
        if not old["metadata"].get("deletionTimestamp"):
            return []
        added = set(new["metadata"].get("finalizers") or []) - set(
            old["metadata"].get("finalizers") or []
        )
        if added:
            return [
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new "
                    "finalizers " + json.dumps(sorted(added)),
                )
            ]
        return []

    # -- update / patch ----------------------------------------------------------
    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        req: Request | None = None,
        owned: bool = False,
    ) -> Obj:
        """Update (PUT); `owned` means the caller hands `body` over (see _decode)."""
        req = req or Request()
        new = self._decode(rt, body, owned=owned)
        if new["metadata"].get("name") != name:
            raise bad_request(
                f"the name of the object ({new['metadata'].get('name')}) does not match the name "
                f"on the URL ({name})"
            )
        self._set_namespace(rt, new["metadata"], namespace)
        with self.store.lock:
            old = self._current(rt, namespace, name)
            rv = new["metadata"].get("resourceVersion")
            if not rv and not rt.unconditional_update:
                raise invalid_object(  # named by resource here, as the real server does
                    rt.plural,
                    rt.group,
                    name,
                    [invalid("metadata.resourceVersion", 0, "must be specified for an update")],
                )
            return self._write(rt, old, new, subresource=subresource, req=req)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch: Any,
        *,
        content_type: str,
        subresource: str = "",
        req: Request | None = None,
        owned: bool = False,
    ) -> Obj:
        """Patch; `owned` means the caller hands `patch` over (see _decode).

        The patched object shares what the patch did not touch with the stored one.
        That is safe because nothing below changes a nested value in place: admission
        copies on write (schema.drop_nulls/apply_defaults, builtin_schema.prune), and
        the top level and metadata, which it does change, are fresh (_decode).
        """
        req = req or Request()
        patch = patch if owned else clone(patch)
        with self.store.lock:
            old = self._current(rt, namespace, name)
            patched = apply_patch(
                self.present(rt, old),
                patch,
                content_type=content_type,
                custom=rt.is_custom,
            )
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise bad_request("patched object is not a Kubernetes object")
            new = self._decode(rt, patched, owned=True)
            if new["metadata"].get("name") != name:
                raise bad_request("metadata.name: the name cannot be changed by a patch")
            self._set_namespace(rt, new["metadata"], namespace)
            return self._write(rt, old, new, subresource=subresource, req=req)

    def _current(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        old = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        return old

    def _write(
        self, rt: ResourceType, old: Obj, new: Obj, *, subresource: str, req: Request
    ) -> Obj:
        name = old["metadata"]["name"]
        rv = new["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, rt.group, name)
        uid = new["metadata"].get("uid")
        if uid and uid != old["metadata"]["uid"]:
            raise invalid_object(
                rt.kind,
                rt.group,
                name,
                [invalid("metadata.uid", uid, "field is immutable")],
            )
        new = self._merge_subresource(rt, old, new, subresource)
        new = self._admit(rt, new, old, req)
        self.validate_admission(rt, new, old, req)
        self._bump_generation(rt, old, new)
        if _same(new, old):
            return self.present(rt, old)
        if req.dry_run:
            return self.present(rt, new)
        meta = new["metadata"]
        if self._is_released(new):
            removed = self.store.remove(rt.key, meta.get("namespace", ""), name)
            return self.present(rt, removed or new)
        stored = self.store.put(rt.key, new)
        self._after_write(rt, stored)
        return self.present(rt, stored)

    def _merge_subresource(self, rt: ResourceType, old: Obj, new: Obj, subresource: str) -> Obj:
        if subresource == "status":
            merged = _fresh_top(old)  # old's spec is shared, never changed (see patch)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            merged["apiVersion"], merged["kind"] = new["apiVersion"], new["kind"]
            return merged
        if subresource:
            raise not_found(f"{rt.plural}/{subresource}", rt.group, old["metadata"]["name"])
        meta = new["metadata"]
        old_meta = old["metadata"]
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("managedFields", None)
        if rt.has_status:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        if rt.plural == "namespaces":
            new["spec"] = old.get("spec", {})
        return new

    def _bump_generation(self, rt: ResourceType, old: Obj, new: Obj) -> None:
        if not rt.has_generation:
            return
        skip = ("metadata", "status") if rt.has_status else ("metadata",)

        def body(o: Obj) -> Obj:
            return {k: v for k, v in o.items() if k not in skip and k not in ("apiVersion", "kind")}

        gen = int(old["metadata"].get("generation", 1))
        new["metadata"]["generation"] = gen + 1 if body(new) != body(old) else gen

    def _is_released(self, obj: Obj) -> bool:
        """Deleting, no finalizers left, and no grace period running (the generic store's
        ShouldDeleteDuringUpdate): a pod deleted gracefully waits for its kubelet's delete
        with grace 0; one deleted with grace 0 (say, never bound) goes with its last
        finalizer."""
        meta = obj["metadata"]
        if (
            not meta.get("deletionTimestamp")
            or meta.get("finalizers")
            or self._spec_finalizers(obj)
        ):
            return False
        return not meta.get("deletionGracePeriodSeconds")

    def _spec_finalizers(self, obj: Obj) -> list[str]:
        if obj.get("kind") == "Namespace":
            return list((obj.get("spec") or {}).get("finalizers") or [])
        return []

    def _after_write(self, rt: ResourceType, stored: Obj) -> None:
        if (rt.group, rt.plural) == (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
        ):
            self.on_crd_write(stored)


def _fresh_top(obj: Obj) -> Obj:
    """A shallow copy with its own metadata dict: the parts admission writes to."""
    out = dict(obj)
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = dict(out["metadata"])
    return out


def _same(new: Obj, old: Obj) -> bool:
    """A write that changes nothing is not persisted (no new resourceVersion, no event)."""
    a = {
        **new,
        "metadata": {k: v for k, v in new["metadata"].items() if k != "resourceVersion"},
    }
    b = {
        **old,
        "metadata": {k: v for k, v in old["metadata"].items() if k != "resourceVersion"},
    }
    return a == b
