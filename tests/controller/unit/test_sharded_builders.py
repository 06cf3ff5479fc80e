"""A run spread over several pods (spec.parallelism): its contract, Job, CronJob and the names
Kubernetes would refuse. Nothing is faked: builders and validation are pure functions.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from contracts.run import PARALLELISM_MAX, InferenceRunSpec
from controller.core import builders
from controller.core.decide import cron_job_ops
from controller.core.resolve import resolve
from controller.core.settings import Settings
from controller.core.validation import Problem, parallelism_problem, run_spec_problems
from tests.controller.unit.objects import CONFIG_SPEC, config, resolved, run

SETTINGS = Settings(default_runner_image="ghcr.io/longrun/runner:default")
SCHEDULED = {"schedule": "0 * * * *"}


def spec(**fields: object) -> InferenceRunSpec:
    return InferenceRunSpec.model_validate({"configRef": {"name": "cfg"}, **fields})


def test_contract_names_the_partitioning_of_a_run_over_several_pods() -> None:
    contract = json.loads(builders.build_contract(resolved({"parallelism": 4})).to_json())
    assert contract["partitioning"] == {"count": 4, "rule": "chunkRoundRobin"}


@pytest.mark.parametrize(
    ("storage_input", "rule"),
    [
        ({"file": {"path": "/in.parquet"}}, "chunkRanges"),
        ({"file": {"path": "/data/", "format": "parquet"}}, "chunkRanges"),
        ({"s3": {"bucket": "data", "prefix": "in/", "format": "parquet"}}, "chunkRanges"),
        ({"s3": {"bucket": "data", "key": "in/part.PARQ"}}, "chunkRanges"),
        ({"file": {"path": "/in.parquet", "format": "jsonl"}}, "chunkRoundRobin"),
        ({"s3": {"bucket": "data", "prefix": "in/"}}, "chunkRoundRobin"),
        ({"sql": {"url": "sqlite:////in.db", "table": "t", "idField": "n"}}, "chunkRanges"),
        (
            {"sql": {"url": "sqlite:////in.db", "query": "SELECT n FROM t ORDER BY n"}},
            "chunkRoundRobin",
        ),
    ],
)
def test_parquet_and_sql_tables_are_split_into_contiguous_ranges_and_the_rest_round_robin(
    storage_input: dict[str, object], rule: str
) -> None:
    storage = {"input": storage_input, "output": {"file": {"path": "/out"}}}
    built = builders.build_contract(resolved({"parallelism": 3}, storage=storage))
    assert json.loads(built.to_json())["partitioning"] == {"count": 3, "rule": rule}


def test_contract_of_a_one_pod_run_has_no_partitioning() -> None:
    contract = json.loads(builders.build_contract(resolved({"parallelism": 1})).to_json())
    assert "partitioning" not in contract
    assert contract == json.loads(builders.build_contract(resolved()).to_json())


def test_job_of_a_run_over_several_pods_is_indexed_with_a_backoff_limit_per_index() -> None:
    job = builders.build_job(resolved({"parallelism": 4}), SETTINGS)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4
    assert spec["backoffLimitPerIndex"] == 2  # the config's backoffLimit, for each index
    assert spec["maxFailedIndexes"] == 0  # one index failing for good fails the run
    assert "backoffLimit" not in spec  # defaulted to 2147483647: only the per-index one counts
    assert spec["podFailurePolicy"] == builders.pod_failure_policy()


def test_job_of_a_one_pod_run_is_as_before() -> None:
    spec = builders.build_job(resolved(), SETTINGS)["spec"]
    assert spec["backoffLimit"] == 2
    for field in ("completionMode", "completions", "parallelism", "backoffLimitPerIndex"):
        assert field not in spec


def test_pod_failure_policy_fails_the_whole_job_on_a_bad_contract() -> None:
    # Every index reads the same contract: exit 2 on one means exit 2 on all (FailJob, not
    # FailIndex, which would also be valid with backoffLimitPerIndex).
    actions = [rule["action"] for rule in builders.pod_failure_policy()["rules"]]
    assert actions == ["FailJob", "Ignore", "Ignore"]


def test_cron_job_template_is_indexed_like_a_one_shot_job() -> None:
    sharded = resolved({**SCHEDULED, "parallelism": 3})
    template = builders.build_cron_job(sharded, SETTINGS)["spec"]["jobTemplate"]["spec"]
    assert template["completionMode"] == "Indexed"
    assert template["completions"] == template["parallelism"] == 3
    assert (template["backoffLimitPerIndex"], template["maxFailedIndexes"]) == (2, 0)
    assert "backoffLimit" not in template


def test_cron_job_patch_drops_the_indexed_fields_when_parallelism_goes_back_to_one() -> None:
    current = builders.build_cron_job(resolved({**SCHEDULED, "parallelism": 3}), SETTINGS)
    wanted = builders.build_cron_job(resolved(SCHEDULED), SETTINGS)["spec"]
    ops = cron_job_ops(current, wanted)
    removed = {op["path"].rsplit("/", 1)[1] for op in ops if op["op"] == "remove"}
    assert removed == {
        "completionMode",
        "completions",
        "parallelism",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    }
    added = {op["path"]: op.get("value") for op in ops if op["op"] == "add"}
    assert added["/spec/jobTemplate/spec/backoffLimit"] == 2


def test_cron_job_patch_drops_backoff_limit_when_the_run_spreads_over_pods() -> None:
    current = builders.build_cron_job(resolved(SCHEDULED), SETTINGS)
    wanted = builders.build_cron_job(resolved({**SCHEDULED, "parallelism": 2}), SETTINGS)["spec"]
    ops = cron_job_ops(current, wanted)
    assert {"op": "remove", "path": "/spec/jobTemplate/spec/backoffLimit"} in ops


@pytest.mark.parametrize("value", [0, PARALLELISM_MAX + 1])
def test_refuses_parallelism_out_of_range(value: int) -> None:
    with pytest.raises(ValidationError, match="parallelism"):
        spec(parallelism=value)


def test_accepts_a_scheduled_run_over_several_pods() -> None:
    assert run_spec_problems(spec(parallelism=PARALLELISM_MAX, **SCHEDULED), "nightly") == []


def test_refuses_a_run_name_its_pods_cannot_carry_as_host_names() -> None:
    name = "r" * 60  # r...r-255 is 64 characters: no DNS label
    problem = parallelism_problem(spec(parallelism=256), name)
    assert problem is not None and problem.field == "spec.parallelism"
    assert "at most 59" in problem.message and "lower spec.parallelism" in problem.message
    assert parallelism_problem(spec(parallelism=10), name) is None  # r...r-9 fits


def test_refuses_a_dotted_run_name_over_several_pods() -> None:
    problem = parallelism_problem(spec(parallelism=2), "team.run")
    assert problem is not None and "without dots" in problem.message
    assert parallelism_problem(spec(), "team.run") is None  # one pod: any object name


def test_a_scheduled_run_counts_the_name_its_cron_job_gives_each_execution() -> None:
    name = "n" * 51  # its Jobs: n...n-<8 digits>, its pods n...n-<8 digits>-<index>
    problem = parallelism_problem(spec(parallelism=256, **SCHEDULED), name)
    assert problem is not None and "at most 50" in problem.message
    assert parallelism_problem(spec(parallelism=256, **SCHEDULED), "n" * 50) is None
    assert parallelism_problem(spec(parallelism=4, **SCHEDULED), "n" * 80) is None  # cut to 52


def test_refuses_a_config_whose_output_cannot_say_which_chunks_it_holds() -> None:
    # The contract of a run over several pods requires it (contracts/storage_rules.py): the
    # run is refused before any contract or Job is made.
    config_obj = config(
        storage={**CONFIG_SPEC["storage"], "output": {"http": {"url": "http://s/"}}}
    )
    found = resolve(
        run(parallelism=2), spec(parallelism=2), lookup=lambda *_: config_obj, settings=SETTINGS
    )
    assert isinstance(found, Problem)
    assert (found.field, found.reason) == ("spec.parallelism", "OutputNotShareable")
    assert "spec.storage.output.http.committedUrl: required" in found.message
    one_pod = resolve(run(), spec(), lookup=lambda *_: config_obj, settings=SETTINGS)
    assert not isinstance(one_pod, Problem)
