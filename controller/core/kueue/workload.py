"""A Job's Kueue Workload: which one is ours, what it says, and the one field longrun writes.

Kueue makes one Workload per Job it manages (jobframework `ConstructWorkload`): named
`job-<job name>-<5 hex digits of a sha1>` in the Job's namespace, the Job its controller owner.
It reports there:
- `QuotaReserved` False while the Job waits, with reason `Pending` (or `Inadmissible` when the
  LocalQueue or ClusterQueue is missing or stopped) and Kueue's words as the message:
  "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor
  default, 1 more needed";
- `Admitted` True once quota is reserved and the admission checks passed: Kueue then
  un-suspends the Job;
- `Evicted` True (reason `Preempted`, `PodsReadyTimeout`, `Deactivated`, ...) when it takes the
  Job back and suspends it, with a `Preempted` condition saying why (`InClusterQueue`, ...);
  on the next admission both turn False, their messages starting "Previously: ".

`spec.active` is the switch Kueue leaves to users: false evicts the Workload (Evicted, reason
`Deactivated`), which suspends its Job, and keeps it out of the queue; true queues it again.
longrun sets it for the run's `suspend` and `cancel`, and marks the Workload with an
annotation when it does, so that it re-activates only a Workload it deactivated itself. One
Kueue deactivated (a requeuing limit, a maximum execution time: `DeactivatedDueTo...`) or a
person deactivated stays so, until the run is suspended and resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.conditions import Want
from controller.core.names import GROUP_DOMAIN
from controller.core.ports import Obj

KIND = "Workload"
DEACTIVATED_ANNOTATION = f"{GROUP_DOMAIN}/deactivated"  # "longrun deactivated it"
PREEMPTED_REASON = "Preempted"  # Kueue's eviction reason for a preemption
WORKLOAD_PATIENCE = 30.0  # seconds without a Workload before the run asks whether Kueue runs


@dataclass(frozen=True)
class Waiting:
    """Why a queued Job has not started: a CamelCase reason and a sentence."""

    reason: str
    message: str


def owned(job: Obj | None, workload: Obj | None) -> Obj | None:
    """`workload` when its controller owner is `job` (Kueue's, for this very Job)."""
    if job is None or workload is None:
        return None
    uid = (job.get("metadata") or {}).get("uid")
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    mine = any(r.get("controller") and r.get("kind") == "Job" and r.get("uid") == uid for r in refs)
    return workload if mine and uid else None


def name_of(workload: Obj | None) -> str | None:
    """The Workload's name, if there is one."""
    return (workload.get("metadata") or {}).get("name") if workload is not None else None


def condition(workload: Obj, type_: str) -> Obj | None:
    """Kueue's condition `type_` on the Workload, if any."""
    for found in (workload.get("status") or {}).get("conditions") or []:
        if isinstance(found, dict) and found.get("type") == type_:
            return found
    return None


def _is_true(workload: Obj, type_: str) -> bool:
    found = condition(workload, type_)
    return found is not None and found.get("status") == "True"


def is_active(workload: Obj) -> bool:
    """`spec.active` (true when absent, as Kueue defaults it)."""
    return (workload.get("spec") or {}).get("active") is not False


def is_admitted(workload: Obj | None) -> bool:
    """Kueue admitted the Workload (and so starts, or started, its Job)."""
    return workload is not None and _is_true(workload, "Admitted")


def deactivated_by_us(workload: Obj) -> bool:
    """The Workload carries longrun's mark: the run's suspend or cancel deactivated it."""
    return DEACTIVATED_ANNOTATION in ((workload.get("metadata") or {}).get("annotations") or {})


def active_patch(workload: Obj, *, active: bool) -> Obj | None:
    """The merge patch that makes the Workload (in)active for the run; None when it is as
    wanted, or inactive and not ours to re-activate."""
    ours = deactivated_by_us(workload)
    if not active:
        if not is_active(workload) and ours:
            return None
        return {"metadata": {"annotations": {DEACTIVATED_ANNOTATION: "true"}},
                "spec": {"active": False}}  # fmt: skip
    if is_active(workload) or not ours:
        return None
    return {"metadata": {"annotations": {DEACTIVATED_ANNOTATION: None}}, "spec": {"active": True}}


def cluster_queue(workload: Obj) -> str:
    """The ClusterQueue that reserved quota, or an empty string."""
    admission = (workload.get("status") or {}).get("admission") or {}
    return str(admission.get("clusterQueue") or "")


def waiting(
    workload: Obj | None, *, job_name: str, queue: str | None, waited: float = 0.0
) -> Waiting:
    """Why Kueue has not started the Job (yet, or again), in Kueue's own words; `waited`:
    seconds since the Job was made."""
    if workload is None:
        where = f'LocalQueue "{queue}"' if queue else "no queue name (Kueue manages every Job)"
        text = f"waiting for Kueue to make the Workload of Job {job_name} ({where})"
        if waited < WORKLOAD_PATIENCE:  # Kueue makes it within moments
            return Waiting("WaitingForWorkload", text)
        return Waiting(
            "NoWorkload",
            f"{text} for {waited:.0f} s: is Kueue running, and does it manage this namespace?",
        )
    evicted = condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        return _evicted(workload, evicted)
    if not is_active(workload):
        return Waiting(
            "Deactivated",
            f"Kueue's Workload {name_of(workload)} is inactive (spec.active: false); suspend and "
            "resume the run to queue it again",
        )
    if is_admitted(workload):
        where = cluster_queue(workload)
        return Waiting("Admitted", f"admitted by ClusterQueue {where}; Kueue starts the Job")
    reserved = condition(workload, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return Waiting(
            "QuotaReserved",
            f"quota reserved in ClusterQueue {cluster_queue(workload)}; waiting for its "
            "admission checks",
        )
    if reserved is not None:
        return Waiting(str(reserved.get("reason") or "Pending"), str(reserved.get("message") or ""))
    return Waiting("Pending", f"Kueue has not considered Workload {name_of(workload)} yet")


def _evicted(workload: Obj, evicted: Obj) -> Waiting:
    reason = str(evicted.get("reason") or "Evicted")
    if reason == PREEMPTED_REASON:
        why = condition(workload, "Preempted") or evicted
        return Waiting(
            "Preempted",
            f"preempted by Kueue ({why.get('reason') or reason}): {why.get('message') or ''}; "
            "the run resumes after its committed chunks when Kueue admits it again",
        )
    resume = "; suspend and resume the run to queue it again" if not is_active(workload) else ""
    return Waiting(
        "Evicted", f"evicted by Kueue ({reason}): {evicted.get('message') or ''}{resume}"
    )


def preemption(workload: Obj | None) -> Want | None:
    """The run's `Preempted` condition, mirroring Kueue's: True while the Job is preempted,
    False once admitted again (Kueue's message keeps what happened: "Previously: ...")."""
    found = condition(workload, "Preempted") if workload is not None else None
    if found is None:
        return None
    message = str(found.get("message") or "")
    if found.get("status") == "True":
        return Want("Preempted", True, str(found.get("reason") or PREEMPTED_REASON), message)
    return Want("Preempted", False, "Readmitted", message)
