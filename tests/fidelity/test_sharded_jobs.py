"""The Job and CronJob of a run over several pods (spec.parallelism), as the API server takes
them: accepted, with `backoffLimit` defaulted so that only the per-index limit counts, and the
job template of a CronJob left as built. The run names it refuses, which longrun refuses
first (controller/core/validation.py `parallelism_problem`). And the CRD's rule that fixes a
one-shot run's parallelism.

Real: both backends (the name rule on the real one only: the emulator does not check an
Indexed Job's pod host names, a divergence longrun's own validation makes moot), the builders'
Job and CronJob, created suspended so no pod is ever wanted. Faked: nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from contracts.run import ONE_SHOT_FIXED_MESSAGE, InferenceRunSpec
from controller.core import builders
from controller.core.decide import cron_job_ops
from controller.core.settings import Settings
from controller.core.validation import parallelism_problem
from tests.controller.unit.objects import resolved
from tests.fidelity.conftest import GROUP, VERSION, Cluster

SETTINGS = Settings(default_runner_image="busybox")
RETRY_FIELDS = ("backoffLimit", "backoffLimitPerIndex", "completionMode", "completions")
RETRY_FIELDS += ("maxFailedIndexes", "parallelism")


def _job(**run_spec: Any) -> dict[str, Any]:
    job = builders.build_job(resolved({"suspend": True, **run_spec}), SETTINGS)
    for key in ("ownerReferences", "namespace"):  # made in the test's namespace, owned by none
        job["metadata"].pop(key)
    return job


def test_the_indexed_job_is_accepted_and_only_the_per_index_limit_counts(kube: Cluster) -> None:
    made = kube.batch.create_namespaced_job(kube.ns, _job(parallelism=4))
    spec = kube.api.sanitize_for_serialization(made)["spec"]
    assert {k: spec[k] for k in RETRY_FIELDS} == {
        "backoffLimit": 2147483647,
        "backoffLimitPerIndex": 2,
        "completionMode": "Indexed",
        "completions": 4,
        "maxFailedIndexes": 0,
        "parallelism": 4,
    }
    assert spec["podFailurePolicy"] == builders.pod_failure_policy()


def test_the_cron_jobs_indexed_template_is_kept_as_built(kube: Cluster) -> None:
    cron_job = builders.build_cron_job(
        resolved({"parallelism": 3, "schedule": "0 2 * * *"}), SETTINGS
    )
    for key in ("ownerReferences", "namespace"):
        cron_job["metadata"].pop(key)
    made = kube.batch.create_namespaced_cron_job(kube.ns, cron_job)
    template = kube.api.sanitize_for_serialization(made)["spec"]["jobTemplate"]["spec"]
    built = cron_job["spec"]["jobTemplate"]["spec"]
    assert {k: template.get(k) for k in RETRY_FIELDS} == {k: built.get(k) for k in RETRY_FIELDS}


@pytest.mark.parametrize(("name", "parallelism"), [("r" * 60, 256), ("batch.nightly", 2)])
def test_a_name_the_pods_cannot_carry_is_refused_as_longrun_says(
    kube: Cluster, name: str, parallelism: int
) -> None:
    if not kube.is_real:
        pytest.skip("the emulator does not check an Indexed Job's pod host names")
    spec = InferenceRunSpec.model_validate({"configRef": {"name": "c"}, "parallelism": parallelism})
    assert parallelism_problem(spec, name) is not None
    job = _job(parallelism=parallelism)
    job["metadata"]["name"] = name
    with pytest.raises(ApiException) as refused:
        kube.batch.create_namespaced_job(kube.ns, job)
    assert refused.value.status == 422
    assert "will not able to create pod with invalid DNS label" in str(refused.value.body)
    job["metadata"]["name"] = fixed = name.replace(".", "-")[:59]  # what longrun asks for
    assert parallelism_problem(spec, fixed) is None
    kube.batch.create_namespaced_job(kube.ns, job)


def test_a_one_shot_runs_parallelism_is_fixed_and_a_scheduled_runs_may_change(
    kube: Cluster,
) -> None:
    for name, more in (("once", {}), ("nightly", {"schedule": "0 2 * * *"})):
        spec = {"configRef": {"name": "c"}, "parallelism": 2, **more}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceRun"}
        body |= {"metadata": {"name": name}, "spec": spec}
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, kube.ns, "inferenceruns", body)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{kube.ns}/inferenceruns/"
    merge = "application/merge-patch+json"
    refused = kube.raw("PATCH", path + "once", {"spec": {"parallelism": 4}}, content_type=merge)
    assert refused.status == 422 and ONE_SHOT_FIXED_MESSAGE in refused.body["message"]
    changed = kube.raw("PATCH", path + "nightly", {"spec": {"parallelism": 4}}, content_type=merge)
    assert changed.status == 200 and changed.body["spec"]["parallelism"] == 4


def test_the_cron_jobs_patch_turns_its_template_from_indexed_to_one_pod_and_back(
    kube: Cluster,
) -> None:
    def built(parallelism: int) -> dict[str, Any]:
        spec = {"parallelism": parallelism, "schedule": "0 2 * * *"}
        cron_job = builders.build_cron_job(resolved(spec), SETTINGS)
        for key in ("ownerReferences", "namespace"):
            cron_job["metadata"].pop(key)
        return cron_job

    kube.batch.create_namespaced_cron_job(kube.ns, built(3))
    path = f"/apis/batch/v1/namespaces/{kube.ns}/cronjobs/run"
    for parallelism in (1, 3):
        current = kube.raw("GET", path).body
        wanted = built(parallelism)["spec"]
        ops = cron_job_ops(current, wanted)
        answer = kube.raw("PATCH", path, ops, content_type="application/json-patch+json")
        assert answer.status == 200, answer.body
        template = answer.body["spec"]["jobTemplate"]["spec"]
        expected = wanted["jobTemplate"]["spec"]
        assert {k: template.get(k) for k in RETRY_FIELDS} == {
            k: expected.get(k) for k in RETRY_FIELDS
        }
