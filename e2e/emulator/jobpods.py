"""Pure helpers of the Job controller: conditions, completed indexes, pod state, failure policy.

Kept apart from the controller loop so each rule (podFailurePolicy matching,
`completedIndexes` compression) can be read and tested on plain dicts.
"""

from __future__ import annotations

from typing import Any

from .codec import clone

Obj = dict[str, Any]
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def is_finished(job: Obj) -> str | None:
    """'Complete' or 'Failed' when the Job has that condition True."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return None


def condition(job: Obj, type_: str) -> Obj | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return dict(cond)
    return None


def format_indexes(indexes: set[int]) -> str:
    """Compress {0,1,2,4,6,7} to '0-2,4,6,7' like status.completedIndexes: a run of two is
    written as two numbers (orderedIntervals.String)."""
    out: list[str] = []
    run: list[int] = []
    for i in [*sorted(indexes), None]:
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            sep = "-" if len(run) > 2 else ","
            out.append(f"{run[0]}{sep}{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [] if i is None else [i]
    return ",".join(out)


def parse_indexes(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "Pending"))


def terminal(pod: Obj) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def ready(pod: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def completion_index(pod: Obj) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_KEY)
    return int(value) if value is not None else None


def inject_index_env(spec: Obj) -> None:
    """JOB_COMPLETION_INDEX from the index label (PodIndexLabel, on since 1.28, GA in 1.32)."""
    env = {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {
            "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{INDEX_KEY}']"}
        },
    }
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or []:
            if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
                c["env"] = [*(c.get("env") or []), env]


def pod_failure_action(job: Obj, pod: Obj) -> tuple[str, str]:
    """First matching podFailurePolicy rule's action (default Count) and its message."""
    rules = (job["spec"].get("podFailurePolicy") or {}).get("rules") or []
    pod_id = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    conditions = (pod.get("status") or {}).get("conditions") or []
    for i, rule in enumerate(rules):
        action = rule.get("action", "Count")
        on_codes = rule.get("onExitCodes")
        if on_codes:
            for cs in statuses:
                term = (cs.get("state") or {}).get("terminated")
                if not term or on_codes.get("containerName") not in (None, cs["name"]):
                    continue
                code = term.get("exitCode", 0)
                values = on_codes.get("values") or []
                hit = (
                    code in values
                    if on_codes.get("operator") == "In"
                    else code != 0 and code not in values
                )
                if hit:
                    return (
                        action,
                        f"Container {cs['name']} for pod {pod_id} failed with exit code {code} "
                        f"matching {action} rule at index {i}",
                    )
        for pattern in rule.get("onPodConditions") or []:
            for cond in conditions:
                if cond["type"] == pattern.get("type") and cond["status"] == pattern.get(
                    "status", "True"
                ):
                    return (
                        action,
                        f"Pod {pod_id} has condition {cond['type']} matching {action} rule "
                        f"at index {i}",
                    )
    return "Count", ""


def pod_body(job: Obj, index: int | None, extra: dict[str, str] | None, *, tracking: str) -> Obj:
    """A new pod of the Job from its template (a clone); Indexed: its index, hostname, env,
    and `extra` annotations (the per-index failure counts)."""
    meta = job["metadata"]
    template = clone(job["spec"]["template"])
    pmeta = template.get("metadata") or {}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    pod_meta: Obj = {
        "generateName": f"{meta['name']}-" if index is None else f"{meta['name']}-{index}-",
        "namespace": meta["namespace"],
        "labels": dict(pmeta.get("labels") or {}),
        "annotations": dict(pmeta.get("annotations") or {}),
        "finalizers": [tracking],
        "ownerReferences": [owner],
    }
    spec = template.get("spec") or {}
    if index is not None:
        pod_meta["annotations"].update({INDEX_KEY: str(index), **(extra or {})})
        pod_meta["labels"][INDEX_KEY] = str(index)
        spec.setdefault("hostname", f"{meta['name']}-{index}")
        inject_index_env(spec)
    if not pod_meta["annotations"]:
        del pod_meta["annotations"]
    return {"metadata": pod_meta, "spec": spec}
