"""kube-controller-manager's pod garbage collector, the part that pods of no node need.

A pod deleted before it was bound has no kubelet to finish it, and a finalizer (the Job
controller's tracking finalizer) keeps it: PodGC's `gcUnscheduledTerminating` marks it
Failed (a status patch) and deletes it with grace 0, so the Job controller counts it and
lets it go. The real controller sweeps every 20 s; this one acts on the pod's event.
Orphaned pods of deleted Nodes and the terminated-pod threshold are not emulated.
"""

from __future__ import annotations

from typing import Any

from .api import Api
from .errors import ApiError
from .options import DeleteOptions
from .patch import MERGE_PATCH
from .store import Event

Obj = dict[str, Any]


def is_unscheduled_terminating(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp")) and not pod["spec"].get("nodeName")


class PodGC:
    """Force-deletes unscheduled terminating pods, as `gcUnscheduledTerminating` does."""

    name = "podgc"

    def __init__(self, api: Api) -> None:
        self.api = api

    def keys_for(self, event: Event) -> list[str]:
        if event.key != "pods" or event.type == "DELETED":
            return []
        if not is_unscheduled_terminating(event.obj):
            return []
        meta = event.obj["metadata"]
        return [f"{meta['namespace']}/{meta['name']}"]

    def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        rt = self.api.registry.get("", "v1", "pods")
        assert rt is not None
        pod = self.api.store.get(rt.key, namespace, name)
        if pod is None or not is_unscheduled_terminating(pod):
            return
        try:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                patch = {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"phase": "Failed"}}
                self.api.patch(
                    rt, namespace, name, patch, content_type=MERGE_PATCH, subresource="status"
                )
            uid = pod["metadata"]["uid"]
            self.api.delete(
                rt, namespace, name, DeleteOptions(grace_period=0, precondition_uid=uid)
            )
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone, or another pod of that name
                raise
