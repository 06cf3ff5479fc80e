"""Secrets stay in Secrets, pods pass "restricted", Krateo CRs work — on either backend.

Real: the backend (stores exactly what the controller wrote), the node agent (a pod
starts only once the Secrets it mounts exist), the controller. Faked: what pods do
(scripted). The restricted-profile check below encodes the Pod Security Standards rules
that apply to the fields longrun sets (tests/security checks them with admission).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.fixtures import eventually
from tests.controller.emulated.harness import CONFIG_SPEC, GROUP, VERSION, Env

SECRET_VALUE = "s3cr3t-value-never-copied"
KRATEO = Path(__file__).resolve().parents[3] / "testdata/krateo-upstream/testdata-custom.yaml"
REPO_KRATEO = Path(__file__).resolve().parents[3] / "testdata/examples/krateo/krateo-custom.yaml"


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """Pod Security Standards "restricted" rules relevant to longrun's pods."""
    problems = []
    pod_sc = pod_spec.get("securityContext") or {}
    if pod_spec.get("hostNetwork") or pod_spec.get("hostPID") or pod_spec.get("hostIPC"):
        problems.append("host namespaces")
    for vol in pod_spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= {
            "configMap",
            "emptyDir",
            "secret",
            "projected",
            "downwardAPI",
            "persistentVolumeClaim",
            "ephemeral",
            "csi",
        }:
            problems.append(f"volume type {kinds}")
    for c in pod_spec.get("containers") or []:
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append("allowPrivilegeEscalation")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            problems.append("capabilities drop ALL")
        if set((sc.get("capabilities") or {}).get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append("capabilities add")
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            problems.append("runAsNonRoot")
        if (sc.get("runAsUser") or pod_sc.get("runAsUser")) == 0:
            problems.append("runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append("seccompProfile")
        if sc.get("privileged"):
            problems.append("privileged")
    return problems


def test_no_secret_value_in_any_config_map(env: Env) -> None:
    env.core.create_namespaced_secret(
        env.ns, {"metadata": {"name": "model-key"}, "stringData": {"token": SECRET_VALUE}}
    )
    env.start()
    env.create_config(
        model={
            "protocol": "openai-chat",
            "url": "http://llm:8080",
            "name": "tiny",
            "auth": {"secretRef": {"name": "model-key", "key": "token"}},
        },
        pod={"env": [{"name": "API_TOKEN", "secretKeyRef": {"name": "model-key", "key": "token"}}]},
    )
    env.create_run()
    env.wait_phase("Succeeded")
    assert all(SECRET_VALUE not in json.dumps(cm) for cm in env.config_maps())
    pod = env.jobs()[0]["spec"]["template"]["spec"]
    env_vars = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env_vars["API_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "model-key",
        "key": "token",
    }
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/var/run/longrun/secrets/model-key" in mounts


@pytest.mark.emulator_only  # the emulator's clock moves to the cron tick
def test_every_spawned_pod_satisfies_restricted(env: Env) -> None:
    env.scripted.script(exit_code=3)
    env.start()
    env.create_config(
        backoffLimit=1,
        kserve={"modelName": "iris", "modelUrl": "iris/v2/models/iris/infer"},
        model=None,
    )
    env.create_run("once")
    env.create_run("cron", schedule="* * * * *")
    env.wait_phase("Failed", "once")
    env.next_minute()
    eventually(lambda: any("cron" in p["metadata"]["name"] for p in env.pods()))
    pods = env.pods()
    assert len(pods) >= 3
    for pod in pods:
        assert restricted_violations(pod["spec"]) == [], pod["metadata"]["name"]
        assert pod["spec"]["automountServiceAccountToken"] is False
        assert pod["spec"]["restartPolicy"] == "Never"
        container = pod["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def _krateo_docs(path: Path, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        doc["apiVersion"] = f"{GROUP}/{VERSION}"
        doc["metadata"]["namespace"] = namespace
        ref = doc["spec"].get("configRef")
        if ref:
            ref["namespace"] = namespace
    return docs


def test_krateo_endpoint_secret_in_other_namespace_gets_a_clear_condition(env: Env) -> None:
    fixed, run = _krateo_docs(REPO_KRATEO, env.ns)
    # Krateo's own file, unchanged but for apiVersion and namespace
    foreign = _krateo_docs(KRATEO, env.ns)[0]
    foreign["metadata"]["name"] = fixed["metadata"]["name"]
    env.start()
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "inferenceconfigs", foreign)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "inferenceruns", run)
    name = run["metadata"]["name"]
    accepted = eventually(
        lambda: (
            env.condition("Accepted", name).get("reason") == "SecretInOtherNamespace"
            and env.condition("Accepted", name)
        )
    )
    assert f'put the endpoint Secret in namespace "{env.ns}"' in accepted["message"]
    assert env.jobs() == []
    config_name = fixed["metadata"]["name"]

    def config_accepted() -> dict:  # type: ignore[type-arg]
        obj = env.custom.get_namespaced_custom_object(
            GROUP, VERSION, env.ns, "inferenceconfigs", config_name
        )
        conditions = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Accepted"), {})

    # The config itself says so too, at its generation.
    eventually(lambda: config_accepted().get("reason") == "SecretInOtherNamespace")
    # With the Secret moved into the run's namespace the same config runs unchanged (the
    # node agent, as a kubelet, starts the pod only once every Secret it mounts exists).
    secret = {"metadata": {"name": "finops-database-handler-endpoint"}}
    env.core.create_namespaced_secret(env.ns, {**secret, "stringData": {"server-url": "x"}})
    current = env.custom.get_namespaced_custom_object(
        GROUP, VERSION, env.ns, "inferenceconfigs", fixed["metadata"]["name"]
    )
    current["spec"] = fixed["spec"]
    env.custom.replace_namespaced_custom_object(
        GROUP, VERSION, env.ns, "inferenceconfigs", fixed["metadata"]["name"], current
    )
    env.wait_phase("Succeeded", name)
    eventually(lambda: config_accepted().get("status") == "True")
    assert config_accepted()["observedGeneration"] == 2
    pod = env.jobs()[0]["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {
        "/tmp/contract.json",
        "/var/run/longrun/secrets/finops-database-handler-endpoint",
    } <= mounts
    contract = json.loads(env.config_maps()[0]["data"]["contract.json"])
    assert contract["output"] == fixed["spec"]["storage"]["output"]  # custom kind untouched


def test_shared_config_cannot_take_over_the_namespaces_that_use_it(env: Env) -> None:
    """team-a edits its shared config (new image, team-b's Secret in the env): team-b's
    scheduled run keeps running what it accepted until team-b accepts the change."""
    team_a = env.kube.namespace("team-a")
    shared = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceConfig",
        "metadata": {"name": "shared"},
        "spec": {**copy.deepcopy(CONFIG_SPEC), "allowedNamespaces": [env.ns]},
    }
    env.custom.create_namespaced_custom_object(GROUP, VERSION, team_a, "inferenceconfigs", shared)
    env.start()
    env.create_run("nightly", schedule="0 2 * * *")
    env.patch_run("nightly", {"spec": {"configRef": {"name": "shared", "namespace": team_a}}})
    eventually(lambda: env.cron_jobs() and env.status("nightly").get("acceptedConfig"))
    image = _cron_image(env)
    evil = {"spec": {"image": "evil/runner:1", "pod": {"env": [
        {"name": "X", "secretKeyRef": {"name": "b-db-password", "key": "password"}}]}}}  # fmt: skip
    env.custom.patch_namespaced_custom_object(
        GROUP, VERSION, team_a, "inferenceconfigs", "shared", evil
    )
    current = eventually(
        lambda: (
            env.condition("ConfigCurrent", "nightly").get("status") == "False"
            and env.condition("ConfigCurrent", "nightly")
        )
    )
    assert current["reason"] == "ConfigChangeNotAccepted"
    assert _cron_image(env) == image  # still what team-b accepted
    # Events are posted by a background thread: wait for it.
    eventually(lambda: "ConfigChangeNotAccepted" in [e.get("reason") for e in env.events()])
    # team-b reviews the change and accepts it by editing its own run.
    generation = env.custom.get_namespaced_custom_object(
        GROUP, VERSION, team_a, "inferenceconfigs", "shared"
    )["metadata"]["generation"]
    env.patch_run("nightly", {"spec": {"configRef": {"generation": generation}}})
    eventually(lambda: _cron_image(env) == "evil/runner:1")
    # The status write follows the CronJob's: wait for it too.
    eventually(lambda: env.condition("ConfigCurrent", "nightly")["status"] == "True")


def _cron_image(env: Env) -> str:
    template = env.cron_jobs()[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return str(template["containers"][0]["image"])
