"""`longrun run` as a user runs it: retries, fail-fast, deadlines, bad input, schedules.

Real: the command itself (`local.run.main`, in-process), YAML validation, the
controller's builders and status function, subprocesses. Faked: the runner image, mapped with
--image-map to `tests/local/fake_runner.py`, which exits as FAKE_MODE says.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from local.inputs import run_uid
from local.run import main
from tests.local.conftest import fake_image_map, fake_run_yaml

REPO = Path(__file__).resolve().parents[2]


def longrun_run(tmp_path: Path, yaml_text: str, *extra: str) -> int:
    (tmp_path / "run.yaml").write_text(yaml_text)
    (tmp_path / "token.env").write_text("token=abc\n")
    args = ["-f", str(tmp_path / "run.yaml"), "--env-file", f"token={tmp_path / 'token.env'}"]
    args += ["--image-map", fake_image_map(), "--work-dir", str(tmp_path / "work")]
    return main([*args, "--backoff-seconds", "0", *extra])


def attempts(tmp_path: Path) -> int:
    return len(list((tmp_path / "seen").glob("attempt-*.json")))


def test_succeeds_and_prints_the_controllers_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="ok")) == 0
    err = capsys.readouterr().err
    assert "InferenceRun default/fake-run: Succeeded" in err
    assert "records: read=10 written=10" in err and "output: fake://out" in err
    assert "condition Complete=True" in err


def test_retries_failed_pods_up_to_backoff_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="fail", backoff_limit=2))
    assert code == 1
    assert attempts(tmp_path) == 3  # the first pod plus backoffLimit retries
    assert "BackoffLimitExceeded" in capsys.readouterr().err


def test_a_retry_that_succeeds_makes_the_run_succeed(tmp_path: Path) -> None:
    assert longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="fail-then-ok")) == 0
    assert attempts(tmp_path) == 2


def test_exit_2_fails_the_job_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="bad", backoff_limit=5))
    assert code == 2
    assert attempts(tmp_path) == 1
    err = capsys.readouterr().err
    assert "BadContract" in err and "runner exit code 2" in err


def test_active_deadline_kills_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="sleep", timeout=1))
    assert code == 1
    assert time.monotonic() - started < 15
    assert "DeadlineExceeded" in capsys.readouterr().err


def test_run_uid_is_stable_for_the_same_namespace_and_name(tmp_path: Path) -> None:
    longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="ok"))
    longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="ok"))
    uids = {
        json.loads(p.read_text())["contract"]["run"]["uid"]
        for p in (tmp_path / "seen").glob("attempt-*.json")
    }
    assert uids == {run_uid("default", "fake-run")}


def test_invalid_yaml_exits_2_with_the_validation_messages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["-f", str(REPO / "testdata/invalid/bad-auto-delete-policy.yaml")]) == 2
    assert "autoDeletePolicy" in capsys.readouterr().err


def test_missing_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = fake_run_yaml(out=tmp_path, mode="ok").split("---")[2]
    assert longrun_run(tmp_path, text) == 2
    assert "ConfigNotFound" in capsys.readouterr().err


def test_unmapped_image_exits_2_naming_image_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = fake_run_yaml(out=tmp_path, mode="ok").replace("example.com/fake-runner", "x.io/y")
    assert longrun_run(tmp_path, text) == 2
    assert "--image-map x.io/y:1.0=COMMAND" in capsys.readouterr().err


def test_missing_secret_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run.yaml").write_text(fake_run_yaml(out=tmp_path, mode="ok"))
    code = main(
        [
            "-f",
            str(tmp_path / "run.yaml"),
            "--image-map",
            fake_image_map(),
            "--work-dir",
            str(tmp_path / "work"),
        ]
    )
    assert code == 2
    assert "Secret 'token' not found" in capsys.readouterr().err


def test_scheduled_run_executes_one_occurrence_named_like_the_cronjobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = fake_run_yaml(out=tmp_path, mode="ok") + '  schedule: "*/5 * * * *"\n'
    text += "  timeZone: Europe/Rome\n"
    assert longrun_run(tmp_path, text) == 0
    err = capsys.readouterr().err
    assert "running one occurrence now; next scheduled time" in err
    job = re.search(r"as Job (fake-run-(\d+))", err)
    assert job is not None and int(job.group(2)) % 5 == 0
    env = json.loads((tmp_path / "seen/attempt-0.json").read_text())["env"]
    assert env["JOB_NAME"] == job.group(1)


def test_a_run_with_generate_name_runs_afresh_each_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `kubectl create -f run.yaml` makes a new run each time; `longrun run -f` does the same.
    text = fake_run_yaml(out=tmp_path, mode="ok").replace(
        "metadata: {name: fake-run}", "metadata: {generateName: fake-run-}"
    )
    assert longrun_run(tmp_path, text) == 0
    assert longrun_run(tmp_path, text) == 0
    names = re.findall(r"InferenceRun default/(fake-run-\w{5}): Succeeded", capsys.readouterr().err)
    assert len(names) == 2 and names[0] != names[1]
    assert attempts(tmp_path) == 2  # nothing resumed: two runs, one pod each


def test_a_local_pod_gets_its_metrics_endpoint_on_loopback_only(tmp_path: Path) -> None:
    assert longrun_run(tmp_path, fake_run_yaml(out=tmp_path, mode="ok")) == 0
    seen = json.loads((tmp_path / "seen" / "attempt-0.json").read_text())
    # The pod's port comes from the Job; the address from `longrun run`: this host's network.
    assert seen["env"]["LONGRUN_METRICS_PORT"] == "9095"
    assert seen["env"]["LONGRUN_METRICS_ADDRESS"] == "127.0.0.1"


def test_a_service_account_token_is_refused_locally_with_what_to_use_instead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "  model:\n    auth: {serviceAccountToken: {audience: models.example}}\n"
    text = fake_run_yaml(out=tmp_path, mode="ok").replace(
        '  model: {protocol: kserve-v1, url: "http://127.0.0.1:9", name: iris}\n',
        '  model:\n    protocol: kserve-v1\n    url: "http://127.0.0.1:9"\n    name: iris\n'
        + token.removeprefix("  model:\n"),
    )
    assert "serviceAccountToken" in text
    assert longrun_run(tmp_path, text) == 2
    err = capsys.readouterr().err
    assert "model.auth.serviceAccountToken" in err and "model.auth.secretRef" in err
    assert attempts(tmp_path) == 0


def test_a_run_over_several_pods_runs_each_index_and_adds_their_summaries_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml_text = fake_run_yaml(out=tmp_path, mode="ok") + "  parallelism: 3\n"
    assert longrun_run(tmp_path, yaml_text) == 0
    seen = [json.loads(p.read_text()) for p in sorted((tmp_path / "seen").glob("attempt-*.json"))]
    assert [s["env"]["JOB_COMPLETION_INDEX"] for s in seen] == ["0", "1", "2"]
    # The fake run reads an SQL table: contiguous ranges (contracts/contract.py Partitioning).
    assert seen[0]["contract"]["partitioning"] == {"count": 3, "rule": "chunkRanges"}
    assert "records: read=30 written=30" in capsys.readouterr().err  # 3 x the fake's 10


def test_an_index_that_fails_for_good_fails_a_run_over_several_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    yaml_text = fake_run_yaml(out=tmp_path, mode="fail", backoff_limit=1) + "  parallelism: 2\n"
    assert longrun_run(tmp_path, yaml_text) == 1
    assert attempts(tmp_path) == 2  # index 0 and its one retry; index 1 never starts
    assert "MaxFailedIndexesExceeded" in capsys.readouterr().err
