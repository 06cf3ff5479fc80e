"""A Job refused by a ResourceQuota: the status code and message the controller must handle.

Real: both backends. On the real one, ResourceQuota admission in kube-apiserver and the
quota controller of kube-controller-manager (which fills in `status.hard`; skipped, naming
what is missing, without it). The emulator serves no ResourceQuota (a Known divergence):
there the test proves that its documented stand-in, a fault injected on Job creation,
answers what the real server answers. Faked: on the emulator, the refusal itself.
"""

from __future__ import annotations

from typing import Any

from tests.fidelity.conftest import Cluster, wait_for

QUOTA = "no-jobs"


def quota_refusal(job: str, quota: str) -> str:
    """kube-apiserver's words when `count/jobs.batch=0` refuses a Job."""
    return (
        f'jobs.batch "{job}" is forbidden: exceeded quota: {quota}, requested: '
        "count/jobs.batch=1, used: count/jobs.batch=0, limited: count/jobs.batch=0"
    )


def job_body(name: str) -> dict[str, Any]:
    container = {"name": "runner", "image": "busybox", "command": ["true"]}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {"metadata": {"name": name}, "spec": {"template": template}}


def _forbid_jobs(kube: Cluster) -> None:
    quota = {"metadata": {"name": QUOTA}, "spec": {"hard": {"count/jobs.batch": "0"}}}
    path = f"/api/v1/namespaces/{kube.ns}/resourcequotas"
    answer = kube.raw("POST", path, quota)
    if not kube.is_real:  # Known divergence: no ResourceQuota; the stand-in is a fault
        assert answer.status == 404
        kube.handle.faults.fail_next(  # type: ignore[attr-defined]
            "create", "jobs", status=403, namespace=kube.ns, message=quota_refusal("j", QUOTA)
        )
        return
    assert answer.status == 201, answer.body
    kube.handle.require_controllers()

    def counted() -> bool:  # admission refuses everything until the controller counted
        status = kube.core.read_namespaced_resource_quota(QUOTA, kube.ns).status
        return bool(status and status.hard)

    wait_for(counted, what="quota status filled in by the quota controller")


def test_a_job_over_quota_is_refused_with_403_forbidden(kube: Cluster) -> None:
    _forbid_jobs(kube)
    answer = kube.raw("POST", f"/apis/batch/v1/namespaces/{kube.ns}/jobs", job_body("j"))
    assert (answer.status, answer.body["reason"]) == (403, "Forbidden")
    assert answer.body["message"] == quota_refusal("j", QUOTA)
    assert answer.body["code"] == 403
    if kube.is_real:  # the stand-in carries no details (see e2e/README.md)
        assert answer.body["details"] == {"name": "j", "group": "batch", "kind": "jobs"}
