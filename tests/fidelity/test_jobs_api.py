"""Jobs and CronJobs at the API level (no pods run): what the server fills in, the
legacy orphan default of a Job's deletion, and the rules of per-index back-off.

Real: both backends; Jobs are created suspended, so no pod is ever wanted. Faked: nothing.
The controller builds Jobs and CronJobs and compares what it reads back with what it
wants: a default the emulator adds and the real server does not (or the reverse) would
make it see drift that is not there.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fidelity.conftest import Cluster

CONTAINER = {"name": "runner", "image": "busybox", "command": ["true"]}
POD_DEFAULTS = {
    "dnsPolicy": "ClusterFirst",
    "restartPolicy": "Never",
    "schedulerName": "default-scheduler",
    "securityContext": {},
    "terminationGracePeriodSeconds": 30,
}
CONTAINER_DEFAULTS = {
    "imagePullPolicy": "Always",
    "resources": {},
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
}


def _pod_template() -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [dict(CONTAINER)]}}


def _plain(kube: Cluster, obj: Any) -> dict[str, Any]:
    return kube.api.sanitize_for_serialization(obj)  # type: ignore[no-any-return]


def test_a_job_gets_the_servers_defaults_and_a_generated_selector(kube: Cluster) -> None:
    body = {"metadata": {"name": "j"}, "spec": {"suspend": True, "template": _pod_template()}}
    job = _plain(kube, kube.batch.create_namespaced_job(kube.ns, body))
    uid, spec = job["metadata"]["uid"], job["spec"]
    template = spec.pop("template")
    assert spec == {
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "completions": 1,
        "manualSelector": False,
        "parallelism": 1,
        "podReplacementPolicy": "TerminatingOrFailed",
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
        "suspend": True,
    }
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "j",
              "controller-uid": uid, "job-name": "j"}  # fmt: skip
    assert template["metadata"] == {"labels": labels}
    assert job["metadata"]["labels"] == labels  # a Job without labels takes its template's
    assert template["spec"] == {**POD_DEFAULTS, "containers": [{**CONTAINER, **CONTAINER_DEFAULTS}]}
    assert job["metadata"]["generation"] == 1


def test_a_cronjobs_job_template_gets_only_pod_defaults(kube: Cluster) -> None:
    job_template = {"spec": {"template": _pod_template()}}
    body = {
        "metadata": {"name": "cj"},
        "spec": {"schedule": "0 2 * * *", "jobTemplate": job_template},
    }
    spec = _plain(kube, kube.batch.create_namespaced_cron_job(kube.ns, body))["spec"]
    template = spec.pop("jobTemplate")
    assert spec == {"concurrencyPolicy": "Allow", "failedJobsHistoryLimit": 1,
                    "schedule": "0 2 * * *", "successfulJobsHistoryLimit": 3,
                    "suspend": False}  # fmt: skip
    pod = {**POD_DEFAULTS, "containers": [{**CONTAINER, **CONTAINER_DEFAULTS}]}
    assert template == {"metadata": {}, "spec": {"template": {"metadata": {}, "spec": pod}}}


def test_deleting_a_job_orphans_its_pods_by_default_and_says_so(kube: Cluster) -> None:
    body = {"metadata": {"name": "j"}, "spec": {"suspend": True, "template": _pod_template()}}
    kube.batch.create_namespaced_job(kube.ns, body)
    answer = kube.raw("DELETE", f"/apis/batch/v1/namespaces/{kube.ns}/jobs/j")
    assert answer.status == 200
    assert answer.headers.get("Warning") == (
        '299 - "child pods are preserved by default when jobs are deleted; set '
        "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
        'suppress this warning"'
    )


def test_a_jobs_template_is_immutable(kube: Cluster) -> None:
    body = {"metadata": {"name": "j"}, "spec": {"suspend": True, "template": _pod_template()}}
    kube.batch.create_namespaced_job(kube.ns, body)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "runner", "image": "other"}]}}}}
    answer = kube.raw(
        "PATCH",
        f"/apis/batch/v1/namespaces/{kube.ns}/jobs/j",
        patch,
        content_type="application/strategic-merge-patch+json",
    )
    assert answer.status == 422
    assert answer.body["message"].startswith('Job.batch "j" is invalid: spec.template')
    assert answer.body["message"].endswith(": field is immutable")
    # Known divergence: the real server names spec.template.spec for a suspended Job and
    # prints the old value as a Go struct; the emulator names spec.template, in JSON.
    [cause] = answer.body["details"]["causes"]
    assert cause["field"] == ("spec.template.spec" if kube.is_real else "spec.template")


def _indexed(**spec: Any) -> dict[str, Any]:
    return {"completionMode": "Indexed", "completions": 2, "parallelism": 2, **spec}


FAIL_INDEX = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}
HIGH = "when completions are above 100000 and used with backoff limit per index"
# (spec fields, the one error the server gives), as pkg/apis/batch/validation words it.
PER_INDEX_REFUSALS = [
    ({"backoffLimitPerIndex": 1},
     "spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"),
    (_indexed(maxFailedIndexes=1),
     "spec.backoffLimitPerIndex: Required value: when maxFailedIndexes is specified"),
    (_indexed(backoffLimitPerIndex=1, maxFailedIndexes=3),
     "spec.maxFailedIndexes: Invalid value: 3: must be less than or equal to completions"),
    (_indexed(backoffLimitPerIndex=-1),
     "spec.backoffLimitPerIndex: Invalid value: -1: must be greater than or equal to 0"),
    (_indexed(completions=100001, parallelism=1, backoffLimitPerIndex=1),
     "spec.maxFailedIndexes: Required value: must be specified when completions is above 100000"),
    (_indexed(completions=100001, parallelism=10001, backoffLimitPerIndex=1, maxFailedIndexes=1),
     f"spec.parallelism: Invalid value: 10001: must be less than or equal to 10000 {HIGH}"),
    ({"podFailurePolicy": FAIL_INDEX},
     'spec.podFailurePolicy.rules[0].action: Invalid value: "FailIndex": requires the '
     "backoffLimitPerIndex to be set"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "error"), PER_INDEX_REFUSALS)
def test_per_index_backoff_rules_refuse_as_the_server_does(
    kube: Cluster, spec: dict[str, Any], error: str
) -> None:
    body = {
        "metadata": {"name": "j"},
        "spec": {"suspend": True, "template": _pod_template(), **spec},
    }
    answer = kube.raw("POST", f"/apis/batch/v1/namespaces/{kube.ns}/jobs", body)
    assert (answer.status, answer.body["message"]) == (422, f'Job.batch "j" is invalid: {error}')


def test_per_index_backoff_defaults_and_which_fields_may_change(kube: Cluster) -> None:
    spec = _indexed(suspend=True, template=_pod_template(), backoffLimitPerIndex=0,
                    maxFailedIndexes=0, podFailurePolicy=FAIL_INDEX)  # fmt: skip
    job = kube.batch.create_namespaced_job(kube.ns, {"metadata": {"name": "j"}, "spec": spec})
    assert job.spec.backoff_limit == 2147483647  # backoffLimitPerIndex set, even to 0
    path = f"/apis/batch/v1/namespaces/{kube.ns}/jobs/j"
    merge = "application/merge-patch+json"
    changed = kube.raw("PATCH", path, {"spec": {"maxFailedIndexes": 1}}, content_type=merge)
    assert changed.status == 200 and changed.body["spec"]["maxFailedIndexes"] == 1
    fixed = kube.raw("PATCH", path, {"spec": {"backoffLimitPerIndex": 2}}, content_type=merge)
    assert (fixed.status, fixed.body["message"]) == (
        422,
        'Job.batch "j" is invalid: spec.backoffLimitPerIndex: Invalid value: 2: field is immutable',
    )
