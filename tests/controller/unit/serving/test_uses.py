"""Runs that use a ModelDeployment: the config's deploymentRef is rendered from the deployment's
status; a one-shot run waits while it is not Available and gives up after its timeout; the
namespace rules follow those of configs; which runs count as using it (on demand).

Real: contracts, controller.core.serving.uses and the run decision (decide) on plain dicts.
Faked: nothing.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core.decide import decide
from controller.core.serving import uses
from controller.core.settings import Settings
from controller.core.status import Observed, previous_status

NOW = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
STORAGE = {"input": {"file": {"path": "/in.jsonl"}}, "output": {"file": {"path": "/out"}}}
AVAILABLE = {
    "phase": "Running",
    "endpoint": "http://qwen.team.svc.cluster.local:8080",
    "protocol": "openai-chat",
    "modelName": "qwen",
    "apiKeySecret": "qwen-api-keys",
    "conditions": [
        {
            "type": "Available",
            "status": "True",
            "reason": "MinimumReplicasAvailable",
            "lastTransitionTime": "2026-03-01T01:00:00Z",
        }
    ],
}


def config(namespace: str = "team", **ref: Any) -> dict[str, Any]:
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": "cfg", "namespace": namespace, "uid": "cfg-uid", "generation": 1},
        "spec": {
            "model": {"deploymentRef": {"name": "qwen", **ref}, "maxTokens": 8},
            "storage": STORAGE,
            "allowedNamespaces": ["other"],
        },
    }


def deployment(namespace: str = "team", status: Any = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "qwen", "namespace": namespace, "uid": "d-uid", "generation": 1},
        "spec": {
            "model": {"source": "hf://o/r/m.gguf", "format": "gguf"},
            "runtime": {"llamacpp": {}},
            **spec,
        },
        "status": copy.deepcopy(AVAILABLE) if status is None else status,
    }


def run(namespace: str = "team", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "r",
            "namespace": namespace,
            "uid": "run-uid",
            "generation": 1,
            "creationTimestamp": "2026-03-01T01:59:00Z",
        },
        "spec": {"configRef": {"name": "cfg", "namespace": "team"}, **spec},
    }


def observed(run_obj: dict[str, Any], cfg: dict[str, Any], dep: dict[str, Any] | None) -> Observed:
    return Observed(
        run=run_obj,
        spec=InferenceRunSpec.model_validate(run_obj["spec"]),
        previous=previous_status(run_obj),
        config=cfg,
        deployment=dep,
    )


def contract_of(decision: Any) -> dict[str, Any]:
    body = next(w.body for w in decision.writes if w.kind == "ConfigMap")
    return json.loads(body["data"]["contract.json"])  # type: ignore[no-any-return]


def test_the_contract_takes_url_protocol_name_and_key_from_the_deployment() -> None:
    decision = decide(observed(run(), config(), deployment()), Settings(), now=NOW)
    model = contract_of(decision)["model"]
    assert model["url"] == AVAILABLE["endpoint"]
    assert (model["protocol"], model["name"], model["maxTokens"]) == ("openai-chat", "qwen", 8)
    assert model["auth"]["secretRef"] == {"name": "qwen-api-keys", "key": "api-key"}
    assert "deploymentRef" not in model
    job = next(w.body for w in decision.writes if w.kind == "Job")
    assert "qwen-api-keys" in json.dumps(job["spec"]["template"]["spec"])


def test_body_settings_the_deployments_protocol_refuses_are_reported_on_the_run() -> None:
    kserve = {**AVAILABLE, "protocol": "kserve-v2", "modelName": "iris"}
    cfg = config()
    cfg["spec"]["model"] = {"deploymentRef": {"name": "qwen"}, "body": {"seed": 1}}
    decision = decide(observed(run(), cfg, deployment(status=kserve)), Settings(), now=NOW)
    accepted = next(c for c in decision.status.conditions if c.type == "Accepted")
    assert decision.writes == ()
    assert (accepted.status, accepted.reason) == ("False", "InvalidConfig")
    assert accepted.message == "spec.model: body: applies to OpenAI protocols, not kserve-v2"


def test_a_batch_file_cannot_be_sent_to_a_deployment_serving_tensors() -> None:
    kserve = {**AVAILABLE, "protocol": "kserve-v2", "modelName": "iris"}
    cfg = config()
    cfg["spec"]["model"] = {"deploymentRef": {"name": "qwen"}}
    cfg["spec"]["storage"] = {
        "input": {"file": {"path": "/in.jsonl", "format": "openai-batch"}},
        "output": {"file": {"path": "/out"}},
    }
    decision = decide(observed(run(), cfg, deployment(status=kserve)), Settings(), now=NOW)
    accepted = next(c for c in decision.status.conditions if c.type == "Accepted")
    assert (accepted.reason, decision.writes) == ("InvalidConfig", ())
    assert "openai-batch needs an OpenAI protocol" in accepted.message and "kserve-v2" in (
        accepted.message
    )
    ok = decide(observed(run(), cfg, deployment()), Settings(), now=NOW)  # openai-chat
    assert contract_of(ok)["input"]["file"]["format"] == "openai-batch"


def test_a_run_waits_while_the_deployment_is_not_available() -> None:
    idle = {**AVAILABLE, "phase": "Idle", "conditions": [], "message": "no pod is wanted now"}
    decision = decide(observed(run(), config(), deployment(status=idle)), Settings(), now=NOW)
    assert decision.writes == ()
    assert decision.status.phase == "Pending"
    accepted = next(c for c in decision.status.conditions if c.type == "Accepted")
    assert accepted.reason == "DeploymentNotAvailable"
    assert 'waiting for ModelDeployment "team/qwen" to become Available (Idle: no pod' in (
        accepted.message
    )


def test_a_waiting_run_fails_after_its_timeout_and_never_starts_then() -> None:
    obs = observed(run(timeoutSeconds=120), config(), deployment(status={}))
    early = decide(obs, Settings(), now=NOW)
    assert early.status.phase == "Pending" and early.requeue_after == 60
    late = decide(obs, Settings(), now=NOW + timedelta(seconds=61))
    assert late.status.phase == "Failed" and late.status.completion_time is not None
    assert late.status.message is not None and "gave up after spec.timeoutSeconds" in (
        late.status.message
    )
    failed_run = run(timeoutSeconds=120)
    failed_run["status"] = late.status.to_wire()
    again = decide(observed(failed_run, config(), deployment()), Settings(), now=NOW)
    assert again.writes == () and again.status.phase == "Failed"


def test_a_missing_deployment_is_waited_for_too() -> None:
    decision = decide(observed(run(), config(), None), Settings(), now=NOW)
    assert decision.status.phase == "Pending"
    assert decision.status.message == (
        'ModelDeployment "team/qwen" does not exist; create it and the run starts'
    )


def test_a_scheduled_run_makes_its_cron_job_from_an_idle_deployment() -> None:
    idle = {**AVAILABLE, "phase": "Idle", "conditions": []}
    obs = observed(run(schedule="0 2 * * *"), config(), deployment(status=idle))
    kinds = [w.kind for w in decide(obs, Settings(), now=NOW).writes]
    assert kinds == ["ConfigMap", "CronJob"]


def test_a_deployment_in_another_namespace_must_allow_the_run() -> None:
    cfg = config()
    cfg["spec"]["model"]["deploymentRef"]["namespace"] = "models"
    refused = uses.with_deployment(
        _spec(cfg), cfg, deployment("models"), run_namespace="team", scheduled=False
    )
    assert getattr(refused, "reason", None) == "DeploymentNotAllowed"
    allowed = deployment("models", allowedNamespaces=["team"])
    keyless = uses.with_deployment(_spec(cfg), cfg, allowed, run_namespace="team", scheduled=False)
    assert getattr(keyless, "reason", None) == "SecretInOtherNamespace"
    cfg["spec"]["model"]["auth"] = {"secretRef": {"name": "my-copy", "key": "api-key"}}
    ok = uses.with_deployment(_spec(cfg), cfg, allowed, run_namespace="team", scheduled=False)
    assert not hasattr(ok, "reason")
    assert ok.model is not None and ok.model.auth is not None  # type: ignore[union-attr]
    assert ok.model.auth.secret_ref.name == "my-copy"  # type: ignore[union-attr]


def test_another_namespace_learns_nothing_of_a_deployment_that_does_not_allow_it() -> None:
    cfg = config()
    cfg["spec"]["model"]["deploymentRef"]["namespace"] = "models"
    unreadable = deployment("models", status={"phase": 7})
    answers = {
        name: uses.with_deployment(_spec(cfg), cfg, dep, run_namespace="team", scheduled=False)
        for name, dep in {
            "missing": None,
            "not allowing": deployment("models"),
            "not allowing, unreadable status": unreadable,
            "not allowing, failed": deployment("models", status={"phase": "Failed"}),
        }.items()
    }
    said = {(p.reason, p.field, p.message) for p in answers.values()}  # type: ignore[union-attr]
    assert said == {
        (
            "DeploymentNotAllowed",
            "spec.model.deploymentRef",
            'ModelDeployment "models/qwen" does not exist, or does not list namespace "team" in '
            "spec.allowedNamespaces; the run starts when it does",
        )
    }


def test_a_run_waiting_for_another_namespaces_deployment_is_told_its_phase_only() -> None:
    failed = {
        **AVAILABLE,
        "phase": "Failed",
        "conditions": [],
        "message": "download of s3://team-internal/iris.joblib failed",
    }
    dep = deployment("models", status=failed, allowedNamespaces=["team"])
    found = uses.with_deployment(
        _spec(foreign_config()), foreign_config(), dep, run_namespace="team", scheduled=False
    )
    assert getattr(found, "reason", None) == "DeploymentNotAvailable"
    assert "team-internal" not in found.message  # type: ignore[union-attr]
    assert 'ModelDeployment "models/qwen" to become Available (Failed)' in (
        found.message  # type: ignore[union-attr]
    )


def test_a_run_waits_until_its_timeout_for_another_namespaces_deployment_to_allow_it() -> None:
    cfg = config()
    cfg["spec"]["model"]["deploymentRef"]["namespace"] = "models"
    obs = observed(run(timeoutSeconds=120), cfg, deployment("models"))
    early = decide(obs, Settings(), now=NOW)
    assert early.status.phase == "Pending" and early.writes == ()
    late = decide(obs, Settings(), now=NOW + timedelta(seconds=61))
    assert late.status.phase == "Failed"
    assert late.status.message is not None and "gave up after spec.timeoutSeconds" in (
        late.status.message
    )


def _spec(cfg: dict[str, Any]) -> InferenceConfigSpec:
    return InferenceConfigSpec.model_validate(cfg["spec"])


def test_a_config_names_its_deployment_in_its_own_namespace_by_default() -> None:
    target = uses.target_of(config("shared"))
    assert target is not None and target.key == "shared/qwen"
    assert uses.target_of({"metadata": {}, "spec": {"model": {"url": "http://x"}}}) is None


def with_status(obj: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {**obj, "status": {"modelDeployment": "team/qwen", **status}}


RUNNING = {"type": "Running", "status": "True", "reason": "JobRunning"}


def test_only_an_admitted_live_run_uses_its_deployment() -> None:
    one_shot, scheduled = run(), run(schedule="0 2 * * *")
    deleting = {**run(), "metadata": {**run()["metadata"], "deletionTimestamp": "2026-03-01Z"}}
    live = {
        "waiting for it": with_status(one_shot, phase="Pending"),
        "running": with_status(one_shot, phase="Running"),
        "queued (Kueue holds its Job)": with_status(one_shot, phase="Queued"),
        "an execution running": with_status(scheduled, phase="Scheduled", conditions=[RUNNING]),
        "an execution running, suspended since": with_status(
            run(schedule="0 2 * * *", suspend=True), phase="Suspended", conditions=[RUNNING]
        ),
    }
    not_live = {
        "new, not looked at yet": run(),
        "refused (no deployment admitted)": {**one_shot, "status": {"phase": "Pending"}},
        "finished": with_status(one_shot, phase="Succeeded"),
        "failed, or gave up waiting": with_status(one_shot, phase="Failed"),
        "suspended": with_status(run(suspend=True), phase="Suspended"),
        "cancelled": with_status(run(cancel=True), phase="Running"),
        "between executions": with_status(scheduled, phase="Scheduled"),
        "being deleted": with_status(deleting, phase="Running"),
    }
    assert [name for name, obj in live.items() if not uses.is_active(obj)] == []
    assert [name for name, obj in not_live.items() if uses.is_active(obj)] == []


def admitted(run_obj: dict[str, Any], cfg: dict[str, Any], dep: Any, **at: Any) -> str | None:
    """What a run's decision records as the deployment it may use."""
    status = decide(observed(run_obj, cfg, dep), Settings(), now=at.get("now", NOW)).status
    return status.model_deployment


KEY_COPY = {"secretRef": {"name": "my-copy", "key": "api-key"}}


def foreign_config() -> dict[str, Any]:
    cfg = config()
    cfg["spec"]["model"]["deploymentRef"]["namespace"] = "models"
    cfg["spec"]["model"]["auth"] = KEY_COPY
    return cfg


def test_a_run_records_the_deployment_it_was_admitted_to_and_only_then() -> None:
    idle = {**AVAILABLE, "phase": "Idle", "conditions": []}
    allowing = deployment("models", status=idle, allowedNamespaces=["team"])
    assert admitted(run(), config(), deployment()) == "team/qwen"  # started
    assert admitted(run(), config(), deployment(status=idle)) == "team/qwen"  # waits for it
    assert admitted(run(), foreign_config(), allowing) == "models/qwen"
    refused = {
        "the deployment does not allow the run": (run(), foreign_config(), deployment("models")),
        "the deployment does not exist": (run(), config(), None),
        "the config does not allow the run": (run("elsewhere"), config(), deployment()),
        "an invalid config": (run(), {**config(), "spec": {"model": 1}}, deployment()),
        "a config version not accepted": (
            run(configRef={"name": "cfg", "namespace": "team", "generation": 7}),
            config(),
            deployment(),
        ),
        "cancelled before it started": (run(cancel=True), config(), deployment(status=idle)),
    }
    assert {name: admitted(*args) for name, args in refused.items()} == dict.fromkeys(refused)


def test_a_run_that_gave_up_waiting_uses_nothing_any_more() -> None:
    obs = observed(run(timeoutSeconds=60), config(), deployment(status={}))
    gave_up = run(timeoutSeconds=60)
    gave_up["status"] = decide(obs, Settings(), now=NOW + timedelta(seconds=61)).status.to_wire()
    assert gave_up["status"]["phase"] == "Failed" and not uses.is_active(gave_up)
    again = decide(observed(gave_up, config(), deployment()), Settings(), now=NOW)
    assert again.writes == () and not uses.is_active({**gave_up, "status": again.status.to_wire()})


def test_a_pinned_scheduled_run_keeps_counting_for_the_deployment_it_accepted() -> None:
    cfg = config()
    cfg["spec"]["model"]["auth"] = KEY_COPY
    dep = deployment(allowedNamespaces=["other"])
    first = decide(observed(run("other", schedule="0 2 * * *"), cfg, dep), Settings(), now=NOW)
    running = run("other", schedule="0 2 * * *")
    running["status"] = first.status.to_wire()
    assert running["status"]["modelDeployment"] == "team/qwen"
    changed = copy.deepcopy(cfg)  # the owner points the shared config elsewhere
    changed["metadata"]["generation"] = 2
    changed["spec"]["model"]["deploymentRef"]["name"] = "theirs"
    cron = {"metadata": {"name": "r", "namespace": "other", "ownerReferences": [
        {"controller": True, "uid": "run-uid"}]}, "spec": {}}  # fmt: skip
    theirs = {**dep, "metadata": {**dep["metadata"], "name": "theirs"}}
    obs = Observed(**{**vars(observed(running, changed, theirs)), "cron_job": cron})
    pinned = decide(obs, Settings(), now=NOW).status
    assert [c.reason for c in pinned.conditions if c.type == "ConfigCurrent"] == [
        "ConfigChangeNotAccepted"
    ]
    assert pinned.model_deployment == "team/qwen"  # not "team/theirs"
    # The new version refused outright (its deployment does not exist): the same.
    obs = Observed(**{**vars(observed(running, changed, None)), "cron_job": cron})
    assert decide(obs, Settings(), now=NOW).status.model_deployment == "team/qwen"


def test_a_run_started_before_runs_recorded_their_deployment_still_counts() -> None:
    started = run()
    job = {"metadata": {"name": "r", "namespace": "team", "ownerReferences": [
        {"controller": True, "uid": "run-uid"}]}, "status": {"active": 1}}  # fmt: skip
    started["status"] = {
        "phase": "Running",
        "jobName": "r",
        "acceptedConfig": {"uid": "cfg-uid", "generation": 1},
    }
    obs = Observed(**{**vars(observed(started, config(), deployment())), "job": job})
    assert decide(obs, Settings(), now=NOW).status.model_deployment == "team/qwen"
    moved = config()
    moved["metadata"]["generation"] = 2  # changed since: the run's target is not known
    obs = Observed(**{**vars(observed(started, moved, deployment())), "job": job})
    assert decide(obs, Settings(), now=NOW).status.model_deployment is None


def test_a_deployment_counts_only_runs_of_namespaces_it_allows_now() -> None:
    dep = deployment("models", allowedNamespaces=["team"])
    runs = ["models/own", "team/allowed", "tenant-a/hog"]
    assert uses.allowed_runs(dep, runs) == ("models/own", "team/allowed")


def auto_config(**runner: Any) -> dict[str, Any]:
    cfg = config()
    cfg["spec"]["runner"] = {"concurrency": "auto", **runner}
    return cfg


def test_concurrency_auto_starts_from_the_deployments_slots_times_ready_replicas() -> None:
    status = {**AVAILABLE, "slotsPerReplica": 4, "readyReplicas": 3}
    decision = decide(
        observed(run(), auto_config(), deployment(status=status)), Settings(), now=NOW
    )
    runner = contract_of(decision)["runner"]
    assert (runner["concurrency"], runner["initialConcurrency"]) == ("auto", 12)


def test_concurrency_auto_starts_within_its_maximum_and_where_the_config_says() -> None:
    status = {**AVAILABLE, "slotsPerReplica": 16, "readyReplicas": 8}
    capped = auto_config(maxConcurrency=32)
    decision = decide(observed(run(), capped, deployment(status=status)), Settings(), now=NOW)
    assert contract_of(decision)["runner"]["initialConcurrency"] == 32
    chosen = auto_config(initialConcurrency=2)
    decision = decide(observed(run(), chosen, deployment(status=status)), Settings(), now=NOW)
    assert contract_of(decision)["runner"]["initialConcurrency"] == 2


def test_a_fixed_concurrency_or_undeclared_slots_leave_the_start_alone() -> None:
    declared = {**AVAILABLE, "slotsPerReplica": 4, "readyReplicas": 2}
    fixed = config()
    decision = decide(observed(run(), fixed, deployment(status=declared)), Settings(), now=NOW)
    assert "initialConcurrency" not in contract_of(decision)["runner"]
    undeclared = {**AVAILABLE, "readyReplicas": 2}  # KServe, MLServer, Triton declare none
    auto = auto_config()
    decision = decide(observed(run(), auto, deployment(status=undeclared)), Settings(), now=NOW)
    assert "initialConcurrency" not in contract_of(decision)["runner"]


def test_a_tokens_only_deployment_needs_the_run_to_send_a_token() -> None:
    tokens_only = {**AVAILABLE, "apiKeySecret": None, "tokenAudiences": ["qwen.models"]}
    cfg = config()
    waiting = uses.with_deployment(
        _spec(cfg), cfg, deployment(status=tokens_only), run_namespace="team", scheduled=False
    )
    assert getattr(waiting, "reason", None) == "TokenRequired"
    assert "model.auth.serviceAccountToken.audience" in waiting.message  # type: ignore[union-attr]
    assert "qwen.models" in waiting.message  # type: ignore[union-attr]
    cfg["spec"]["model"]["auth"] = {"serviceAccountToken": {"audience": "qwen.models"}}
    cfg["spec"]["model"]["deploymentRef"]["namespace"] = "models"
    foreign = deployment("models", status=tokens_only, allowedNamespaces=["team"])
    ok = uses.with_deployment(_spec(cfg), cfg, foreign, run_namespace="team", scheduled=False)
    assert not hasattr(ok, "reason")  # no key to copy: another namespace is fine
    token = ok.model.auth.service_account_token  # type: ignore[union-attr]
    assert token is not None and token.audience == "qwen.models"
