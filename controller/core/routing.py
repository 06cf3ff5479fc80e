"""Which runs an informer event concerns, and which events need no reconcile.

The adapter keeps the caches and calls these plain functions on every event:
- a run is reconciled when its spec changed (controller-runtime's
  GenerationChangedPredicate), not on a status-only update, most often our own;
- a run no controller has reported on yet goes first: it waits for nothing but
  its Job;
- a config change wakes every run that uses it, and the config itself when its spec
  changed (its own status says whether it is usable);
- a child (ConfigMap, Job, CronJob, Pod) wakes the run it was made for, unless
  the event only echoes an object we wrote ourselves and already reconciled with, or
  changes nothing the controller reads of the child (its scheduling, a finalizer gone);
  that wake is batched (`BATCH_SECONDS`): a pod starting and finishing, a Job finishing
  just after, are read in one pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.core import names

Obj = dict[str, Any]
Generation = tuple[str, int]  # (uid, metadata.generation)
CONFIG_PREFIX = "InferenceConfig/"
# How long a child's wake waits for the child's next updates (the Job controller batches
# its pods' events for 1 s, `syncJobBatchPeriod`, so a Job's status moves in such steps).
BATCH_SECONDS = 1.0


@dataclass(frozen=True)
class Wake:
    """A run key to reconcile; `urgent` keys go to the front of the queue, `batched` ones
    wait BATCH_SECONDS for more events."""

    key: str
    urgent: bool = False
    batched: bool = False


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def object_key(obj: Obj) -> str:
    """`namespace/name` of an object."""
    meta = _meta(obj)
    return names.run_key(meta.get("namespace", ""), meta.get("name", ""))


def resource_version(obj: Obj | None) -> int:
    """An object's resourceVersion as a number (0 when absent or not a number)."""
    try:
        return int(_meta(obj or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def owner_kind(obj: Obj) -> str | None:
    """The kind of the controller owner reference, if any."""
    for ref in _meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


def config_key(key: str) -> str:
    """The work-queue key of a config: run keys are `namespace/name`, config keys
    `InferenceConfig/namespace/name` (names never hold a slash, so both stay distinct)."""
    return f"{CONFIG_PREFIX}{key}"


def split_config_key(key: str) -> str | None:
    """The `namespace/name` of a config's work-queue key; None for a run key."""
    return key.removeprefix(CONFIG_PREFIX) if key.startswith(CONFIG_PREFIX) else None


def run_of(obj: Obj) -> str | None:
    """The key of the run an object was made for (from our annotation)."""
    meta = _meta(obj)
    name = (meta.get("annotations") or {}).get(names.RUN_ANNOTATION)
    return names.run_key(meta.get("namespace", ""), name) if name else None


def config_of(run: Obj) -> str:
    """The key of the config a run references."""
    meta, spec = _meta(run), run.get("spec") or {}
    ref = spec.get("configRef") or {}
    return names.run_key(ref.get("namespace") or meta.get("namespace", ""), ref.get("name", ""))


def is_new_run(run: Obj) -> bool:
    """True for a run no controller has reported on yet: it has no status phase."""
    return not (run.get("status") or {}).get("phase")


def generation_of(obj: Obj) -> Generation:
    """What identifies one spec of one object: its uid and generation."""
    meta = _meta(obj)
    return str(meta.get("uid", "")), int(meta.get("generation") or 0)


def is_spec_change(seen: Generation | None, obj: Obj) -> bool:
    """True unless `obj` has the uid and generation already seen (and is not being deleted).

    A run deleted and created again under the same name (seen through a relist as one
    MODIFIED) has a new uid but may have the same generation.
    """
    return seen != generation_of(obj) or bool(_meta(obj).get("deletionTimestamp"))


def is_own_write(written: Obj | None, obj: Obj) -> bool:
    """True when the watch echoes exactly the version of an object we wrote."""
    return written is not None and resource_version(written) == resource_version(obj)


def wakes(
    kind: str,
    obj: Obj,
    *,
    present: bool,
    spec_changed: bool,
    own_write: bool,
    users: Callable[[str], list[str]],
    news: bool = True,
) -> list[Wake]:
    """The runs to reconcile for one informer event (`present`: added or modified; `news`:
    it changes what the controller reads of a child)."""
    if kind == "InferenceRun":
        if not spec_changed:
            return []
        return [Wake(object_key(obj), urgent=present and is_new_run(obj))]
    if kind == "InferenceConfig":
        own = [Wake(config_key(object_key(obj)))] if present and spec_changed else []
        return own + [Wake(user) for user in users(object_key(obj))]
    run = run_of(obj)
    if run is None or (present and (own_write or not news)):
        return []
    return [Wake(run, batched=True)]
