"""Pure builders: contract, ConfigMap, Job, CronJob. Nothing is faked: no I/O is involved.

The golden contracts in testdata/contracts are shared with the runner tests: the
controller must produce them byte for byte from the examples next to them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core import builders, names
from controller.core.builders import ObjectIdentity, Resolved
from controller.core.settings import Settings
from tests.controller.unit.objects import NS, resolved

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = Settings(default_runner_image="ghcr.io/longrun/runner:default")
GOLDEN = [
    ("iris-sql/iris-sql.yaml", "iris-sql.json", "5be07ada-5fe0-4c9e-a8bc-aaae67d8d344", "default"),
    (
        "krateo/krateo-custom.yaml",
        "krateo-custom.json",
        "0f6c1d52-8d7e-4a53-9d0f-3f1f2a8c9b10",
        None,
    ),
    (
        "openai-batch/openai-batch.yaml",
        "openai-batch.json",
        "7d1e5c3a-2b4f-4e8a-9c61-0a2b3c4d5e6f",
        "default",
    ),
    (
        "sql-messages/sql-messages.yaml",
        "sql-messages.json",
        "3f9a8b7c-6d5e-4f10-8a2b-1c3d5e7f9a0b",
        "default",
    ),
]


@pytest.mark.parametrize(("example", "golden", "uid", "namespace"), GOLDEN)
def test_renders_golden_contracts(
    example: str, golden: str, uid: str, namespace: str | None
) -> None:
    docs = [d for d in yaml.safe_load_all((ROOT / "testdata/examples" / example).read_text()) if d]
    config = next(d for d in docs if d["kind"] == "InferenceConfig")
    run = next(d for d in docs if d["kind"] == "InferenceRun")
    ns = namespace or run["metadata"]["namespace"]
    pair = Resolved(
        run=ObjectIdentity(run["metadata"]["name"], ns, uid, 1),
        spec=InferenceRunSpec.model_validate(run["spec"]),
        config=ObjectIdentity(config["metadata"]["name"], ns, "", 1),
        config_spec=InferenceConfigSpec.model_validate(config["spec"]),
    )
    expected = (ROOT / "testdata/contracts" / golden).read_text()
    assert json.loads(builders.build_contract(pair).to_json()) == json.loads(expected)


def test_config_map_holds_contract_and_is_owned() -> None:
    cm = builders.build_config_map(resolved())
    assert cm["metadata"]["name"] == "run-contract"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "run-uid"
    assert json.loads(cm["data"]["contract.json"])["jobId"] == "run-uid"


def test_job_mounts_contract_read_only_and_sets_identity_env() -> None:
    job = builders.build_job(resolved({"timeoutSeconds": 60}), SETTINGS)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/longrun"]["readOnly"] is True and "/tmp" in mounts
    env = {e["name"]: e for e in container["env"]}
    assert env["CONTRACT_PATH"]["value"] == "/etc/longrun/contract.json"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["pod_uid"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert "batch.kubernetes.io/job-name" in env["JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert env["JOB_ID"]["value"] == "run-uid"
    assert job["spec"]["activeDeadlineSeconds"] == 60 and job["spec"]["backoffLimit"] == 2
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"


def test_file_storage_volume_is_mounted_from_its_claim() -> None:
    storage = {
        "input": {"file": {"path": "/data/in.jsonl", "volume": "shared"}},
        "output": {"file": {"path": "/data/out", "volume": "shared"}},
        "errors": {"file": {"path": "/errors/failed", "volume": "errs", "mountPath": "/errors"}},
    }
    pod = builders.build_job(resolved(storage=storage), SETTINGS)["spec"]["template"]["spec"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {"data-errs": {"claimName": "errs"}, "data-shared": {"claimName": "shared"}}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    # Shared with the output, the input's volume must stay writable.
    assert mounts["/data"] == {"name": "data-shared", "mountPath": "/data", "readOnly": False}
    assert mounts["/errors"]["name"] == "data-errs"


def test_input_only_volume_is_mounted_read_only() -> None:
    storage = {
        "input": {"file": {"path": "/in/rows.csv", "volume": "inputs"}},
        "output": {"file": {"path": "/tmp/out"}},
    }
    pod = builders.build_job(resolved(storage=storage), SETTINGS)["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/in"] == {"name": "data-inputs", "mountPath": "/in", "readOnly": True}


def test_krateo_contract_path_is_mounted_over_writable_tmp() -> None:
    kserve = {"modelName": "iris", "modelUrl": "iris/v2/models/iris/infer"}
    job = builders.build_job(resolved(model=None, kserve=kserve), SETTINGS)
    mounts = job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    krateo = next(m for m in mounts if m["mountPath"] == "/tmp/contract.json")
    assert krateo["subPath"] == "contract.json" and krateo["readOnly"] is True
    assert any(m["mountPath"] == "/tmp" and m["name"] == "tmp" for m in mounts)


def test_secrets_are_wired_by_reference_never_copied() -> None:
    pair = resolved(
        pod={"env": [{"name": "TOKEN", "secretKeyRef": {"name": "api", "key": "token"}}]},
        storage={
            "input": {"sql": {"urlSecretRef": {"name": "db", "key": "url"}, "table": "t"}},
            "output": {"file": {"path": "/out"}},
        },
    )
    pod = builders.build_job(pair, SETTINGS)["spec"]["template"]["spec"]
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"db"}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/var/run/longrun/secrets/db" in mounts
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "api", "key": "token"}


def test_pod_security_passes_restricted() -> None:
    pod = builders.build_job(resolved(), SETTINGS)["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True


def test_pod_failure_policy_fails_fast_on_exit_2_and_ignores_sigterm_and_disruptions() -> None:
    rules = builders.build_job(resolved(), SETTINGS)["spec"]["podFailurePolicy"]["rules"]
    assert rules == [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "runner", "operator": "In", "values": [2]},
        },
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": "runner", "operator": "In", "values": [143]},
        },
        {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
    ]


def test_default_image_and_service_account_come_from_settings() -> None:
    settings = Settings(default_runner_image="img:default", runner_service_account="runner")
    pod = builders.build_job(resolved(image=None), settings)["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "img:default"
    assert pod["serviceAccountName"] == "runner"


def test_cron_job_carries_schedule_and_a_hash_that_tracks_the_spec() -> None:
    first = builders.build_cron_job(
        resolved({"schedule": "*/5 * * * *", "timeZone": "Europe/Rome"}), SETTINGS
    )
    second = builders.build_cron_job(resolved({"schedule": "*/10 * * * *"}), SETTINGS)
    assert first["spec"]["schedule"] == "*/5 * * * *" and first["spec"]["timeZone"] == "Europe/Rome"
    assert first["spec"]["concurrencyPolicy"] == "Forbid"
    hashes = [c["metadata"]["annotations"][names.SPEC_HASH_ANNOTATION] for c in (first, second)]
    assert hashes[0] != hashes[1]


def test_builders_are_deterministic() -> None:
    assert builders.build_job(resolved(), SETTINGS) == builders.build_job(resolved(), SETTINGS)
    assert builders.build_config_map(resolved()) == builders.build_config_map(resolved())


def test_long_names_fit_kubernetes_limits_without_colliding() -> None:
    long_a, long_b = "a" * 200 + "x", "a" * 200 + "y"
    assert len(names.cron_job_name(long_a)) == 52 and len(names.job_name(long_a)) == 63
    assert names.cron_job_name(long_a) != names.cron_job_name(long_b)
    assert names.cron_job_name("short") == "short"
    assert len(names.run_label_value(long_a)) <= 63


def test_volume_names_of_dotted_and_dashed_objects_do_not_collide() -> None:
    # Two Secrets `db.creds` and `db-creds` must not become two volumes of one name.
    assert names.secret_volume_name("db.creds") != names.secret_volume_name("db-creds")
    assert names.claim_volume_name("data.v1") != names.claim_volume_name("data-v1")
    assert names.secret_volume_name("db-creds") == "secret-db-creds"
    assert all(
        len(n) <= 63 and "." not in n
        for n in (names.secret_volume_name("x." * 120 + "y"), names.claim_volume_name("a.b"))
    )
    assert NS == "team"
