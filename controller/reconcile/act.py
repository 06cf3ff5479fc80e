"""Create-or-update of the objects a run owns, controller-runtime `CreateOrUpdate` style.

The rules the code relies on:
- A deterministic name is the lock: create, and on AlreadyExists read the live
  object and decide from its owner reference, never create under another name.
- An object we do not own (no controller reference to this run's UID) is left
  alone and reported as a user error (`NameConflict`).
- Only fields we own are written, and only when they drift: a ConfigMap's data,
  a CronJob's spec (drift detected through our spec-hash annotation, because the
  API server defaults fields we never set). A Job is never updated: its pod
  template is immutable and a one-shot run is immutable too.
"""

from __future__ import annotations

from controller.core import names
from controller.core.ports import ApiError, Cluster, Kind, Obj
from controller.core.validation import Problem

OPTIONAL_CRON = ("timeZone", "startingDeadlineSeconds")
OPTIONAL_JOB = ("activeDeadlineSeconds",)


class UserError(Exception):
    """A problem only the user can fix; reported as a condition, not retried."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def is_owned_by(obj: Obj, uid: str) -> bool:
    """True when `obj` has a controller owner reference to `uid`."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("controller") and ref.get("uid") == uid for ref in refs)


def _not_owned(kind: Kind, obj: Obj) -> UserError:
    name = obj["metadata"]["name"]
    return UserError(
        Problem(
            "metadata.name",
            "NameConflict",
            f'{kind} "{name}" already exists and is not owned by this run; longrun leaves it '
            "alone: delete it or rename the run",
        )
    )


def is_refusal(exc: ApiError) -> bool:
    """400/422: the API server refuses the object itself; sending it again cannot help."""
    return exc.status in (400, 422)


def _refused(kind: Kind, name: str, exc: ApiError) -> UserError:
    return UserError(
        Problem(
            "spec",
            "ChildRejected",
            f'the API server refused {kind} "{name}": {exc.message}; fix the run or its config',
        )
    )


def _patch(cluster: Cluster, kind: Kind, meta: Obj, body: Obj | list[Obj]) -> Obj:
    try:
        return cluster.patch(kind, meta["namespace"], meta["name"], body)
    except ApiError as exc:
        if is_refusal(exc):
            raise _refused(kind, meta["name"], exc) from exc
        raise


def ensure_exists(cluster: Cluster, kind: Kind, desired: Obj, *, observed: Obj | None) -> Obj:
    """The object named by `desired`, created when missing; raises UserError if not ours
    or if the API server refuses it (400/422: a user error, not retried with backoff)."""
    meta = desired["metadata"]
    uid = meta["ownerReferences"][0]["uid"]
    if observed is None:
        try:
            return cluster.create(kind, desired)
        except ApiError as exc:
            if is_refusal(exc):
                raise _refused(kind, meta["name"], exc) from exc
            if not exc.is_already_exists:
                raise
        observed = cluster.read(kind, meta["namespace"], meta["name"])
        if observed is None:  # deleted in between: the retry will create it
            raise ApiError(409, f"{kind} {meta['name']} vanished after AlreadyExists")
    if not is_owned_by(observed, uid):
        raise _not_owned(kind, observed)
    return observed


def ensure_config_map(cluster: Cluster, desired: Obj, *, observed: Obj | None) -> Obj:
    """The contract ConfigMap, with its data brought up to date."""
    current = ensure_exists(cluster, "ConfigMap", desired, observed=observed)
    if current.get("data") == desired["data"]:
        return current
    return _patch(cluster, "ConfigMap", desired["metadata"], {"data": desired["data"]})


def _hash_of(obj: Obj) -> str | None:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(names.SPEC_HASH_ANNOTATION)
    return value if isinstance(value, str) else None


def ensure_cron_job(cluster: Cluster, desired: Obj, *, observed: Obj | None) -> Obj:
    """The CronJob, with schedule/suspend/jobTemplate brought up to date when they drift."""
    current = ensure_exists(cluster, "CronJob", desired, observed=observed)
    wanted = _hash_of(desired)
    if _hash_of(current) == wanted:
        return current
    ops = [*cron_job_ops(current, desired["spec"]), _annotation_op(current, wanted or "")]
    return _patch(cluster, "CronJob", desired["metadata"], ops)


def cron_job_ops(current: Obj, spec: Obj) -> list[Obj]:
    """JSON patch ops setting every CronJob field we own, and removing owned ones we dropped.

    Fields the API server defaulted and we never set (completionMode, parallelism,
    ...) are left as they are: replacing the whole spec would drop them, and the
    real API server only re-defaults them on update, which an emulator may not.
    """
    have = current.get("spec") or {}
    have_job = (have.get("jobTemplate") or {}).get("spec") or {}
    ops: list[Obj] = []
    for key, value in spec.items():
        if key != "jobTemplate":
            ops.append({"op": "add", "path": f"/spec/{key}", "value": value})
    ops += [
        {"op": "remove", "path": f"/spec/{k}"} for k in OPTIONAL_CRON if k in have and k not in spec
    ]
    template = spec["jobTemplate"]
    ops.append({"op": "add", "path": "/spec/jobTemplate/metadata", "value": template["metadata"]})
    for key, value in template["spec"].items():
        ops.append({"op": "add", "path": f"/spec/jobTemplate/spec/{key}", "value": value})
    ops += [
        {"op": "remove", "path": f"/spec/jobTemplate/spec/{k}"}
        for k in OPTIONAL_JOB
        if k in have_job and k not in template["spec"]
    ]
    return ops


def _annotation_op(current: Obj, wanted: str) -> Obj:
    escaped = names.SPEC_HASH_ANNOTATION.replace("~", "~0").replace("/", "~1")
    if (current.get("metadata") or {}).get("annotations"):
        return {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": wanted}
    value = {names.SPEC_HASH_ANNOTATION: wanted}
    return {"op": "add", "path": "/metadata/annotations", "value": value}
