"""A queued run through the whole controller, with the test playing Kueue, on either backend.

Real: the backend (CRDs served, Job controller, garbage collector), the controller (Manager:
informers, discovery of the Workload API when it appears, queue, reconciler), the node agent,
the official client. Faked: Kueue itself — a CRD of the `workloads.kueue.x-k8s.io` shape is
installed, and the test writes the Workload and flips the Job's `spec.suspend` exactly as
Kueue's job and workload controllers do (tests/kueue runs the real Kueue). The point here is
what longrun writes, and what it never writes, whatever Kueue is: no `spec.suspend` of a
queued Job, ever; the Workload's `spec.active` for the run's suspend.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from e2e.fixtures import eventually
from tests.controller.emulated.harness import SUMMARY, Env

GROUP, VERSION, PLURAL = "kueue.x-k8s.io", "v1beta1", "workloads"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INSUFFICIENT = (
    "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
    "default, 1 more needed"
)
Obj = dict[str, Any]
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
WORKLOAD_CRD: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "names": {"kind": "Workload", "listKind": "WorkloadList", "plural": PLURAL,
                  "singular": "workload"},
        "scope": "Namespaced",
        "versions": [{
            "name": VERSION, "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": OPEN, "status": OPEN}}},
        }],
    },
}  # fmt: skip


def _install_workload_api(env: Env) -> Any:
    ext = client.ApiextensionsV1Api(env.kube.api_client())
    try:
        ext.create_custom_resource_definition(WORKLOAD_CRD)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    custom = client.CustomObjectsApi(env.kube.api_client())
    eventually(lambda: custom.list_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL))
    return custom


def _condition(type_: str, status: bool, reason: str, message: str = "") -> Obj:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": stamp}  # fmt: skip


class FakeKueue:
    """What Kueue's controllers write, for the run's one Job."""

    def __init__(self, env: Env, custom: Any) -> None:
        self.env, self.custom = env, custom
        self.name = ""

    def make_workload(self, job: Obj) -> Obj:
        self.name = f"job-{job['metadata']['name']}-a1b2c"
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                 "uid": job["metadata"]["uid"], "controller": True,
                 "blockOwnerDeletion": True}  # fmt: skip
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Workload",
            "metadata": {"name": self.name, "ownerReferences": [owner]},
            "spec": {"active": True, "queueName": "team-a", "podSets": []},
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.env.ns, PLURAL, body)
        return self.conditions(_condition("QuotaReserved", False, "Pending", INSUFFICIENT))

    def conditions(self, *conditions: Obj, admitted_in: str = "") -> Obj:
        status: Obj = {"conditions": list(conditions)}
        if admitted_in:
            status["admission"] = {"clusterQueue": admitted_in, "podSetAssignments": []}
        return self.custom.patch_namespaced_custom_object_status(  # type: ignore[no-any-return]
            GROUP, VERSION, self.env.ns, PLURAL, self.name, {"status": status}
        )

    def workload(self) -> Obj:
        return self.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
            GROUP, VERSION, self.env.ns, PLURAL, self.name
        )

    def set_suspend(self, job: str, suspend: bool) -> None:
        self.env.batch.patch_namespaced_job(job, self.env.ns, {"spec": {"suspend": suspend}})


def _job(env: Env) -> Obj:
    return eventually(lambda: env.jobs() and env.jobs()[0])


def _running_pods(env: Env) -> list[str]:
    return [p["metadata"]["name"] for p in env.pods() if p["status"].get("phase") == "Running"]


def test_a_queued_run_waits_for_kueue_and_is_steered_through_its_workload(env: Env) -> None:
    custom = _install_workload_api(env)  # before the controller starts: discovered at start
    kueue = FakeKueue(env, custom)
    env.scripted.script(hold=True)
    env.start()
    env.create_config(backoffLimit=3)
    env.create_run(queueName="team-a")

    job = _job(env)
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    waiting = env.wait_phase("Queued")
    assert (
        'waiting for Kueue to make the Workload of Job run (LocalQueue "team-a")'
        in (waiting["message"])
    )
    assert env.condition("Queued")["reason"] == "WaitingForWorkload"

    kueue.make_workload(job)
    eventually(lambda: env.condition("Queued").get("reason") == "Pending", timeout=15)
    status = env.status()
    assert status["phase"] == "Queued" and INSUFFICIENT in status["message"]
    assert status["workloadName"] == kueue.name
    env.settle()
    assert env.jobs()[0]["spec"]["suspend"] is True  # longrun never starts it

    # Kueue admits: quota reserved, Admitted, the Job un-suspended by Kueue.
    kueue.conditions(
        _condition("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        _condition("Admitted", True, "Admitted", "The workload is admitted"),
        admitted_in="cq",
    )
    kueue.set_suspend(job["metadata"]["name"], False)
    eventually(lambda: _running_pods(env), timeout=20)
    env.wait_phase("Running", timeout=15)
    assert env.condition("Queued")["reason"] == "Admitted"

    # The run's suspend goes to the Workload, never to the Job.
    env.patch_run("run", {"spec": {"suspend": True}})
    eventually(lambda: kueue.workload()["spec"].get("active") is False, timeout=15)
    marked = kueue.workload()["metadata"].get("annotations") or {}
    assert marked.get("longrun.dev/deactivated") == "true"
    env.settle()
    assert env.jobs()[0]["spec"]["suspend"] is False  # Kueue's to suspend, not longrun's
    assert env.status()["phase"] == "Running"
    # Kueue evicts the deactivated Workload and suspends the Job: the run is Suspended.
    kueue.conditions(_condition("Evicted", True, "Deactivated", "The workload is deactivated"))
    kueue.set_suspend(job["metadata"]["name"], True)
    env.wait_phase("Suspended", timeout=20)

    # Resuming re-activates it (and drops the mark); Kueue queues it again, then admits it.
    env.patch_run("run", {"spec": {"suspend": False}})
    eventually(lambda: kueue.workload()["spec"].get("active") is True, timeout=15)
    assert "longrun.dev/deactivated" not in (kueue.workload()["metadata"].get("annotations") or {})
    kueue.conditions(_condition("QuotaReserved", False, "Pending", INSUFFICIENT))
    env.wait_phase("Queued", timeout=15)
    kueue.conditions(
        _condition("QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        _condition("Admitted", True, "Admitted", "The workload is admitted"),
        admitted_in="cq",
    )
    kueue.set_suspend(job["metadata"]["name"], False)
    pod = eventually(lambda: _running_pods(env) and _running_pods(env)[0], timeout=30)
    env.scripted.finish(pod, exit_code=0, message=SUMMARY)
    done = env.wait_phase("Succeeded", timeout=20)
    assert done["workloadName"] == kueue.name
    assert {c["type"]: c["reason"] for c in done["conditions"]}["Queued"] == "Succeeded"


def test_a_queued_run_suspended_at_creation_makes_no_job_until_resumed(env: Env) -> None:
    env.start()
    env.create_config()
    env.create_run(queueName="team-a", suspend=True)
    held = env.wait_phase("Suspended")
    assert 'LocalQueue "team-a"' in held["message"]
    env.settle()
    assert env.jobs() == []
    env.patch_run("run", {"spec": {"suspend": False}})
    job = _job(env)
    assert job["spec"]["suspend"] is True  # in the queue now, for Kueue to start
    env.wait_phase("Queued")
