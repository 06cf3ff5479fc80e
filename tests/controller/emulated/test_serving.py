"""ModelDeployments end to end on the API emulator: children, status, rollout, cascade, keys.

Real: the emulator (API semantics, generation, status subresource, owner-reference
cascade, watches), the official client, the whole controller (both adapters, both
reconcilers, the work queue). Faked: the Deployment controller and the kubelet for the
server pods: tests write a Deployment's status and a pod's state themselves, as those
controllers would (the emulator runs no Deployment controller).
"""

from __future__ import annotations

import base64
import logging

import pytest
from kubernetes import client

from e2e.fixtures import eventually
from tests.controller.emulated.harness import Env
from tests.controller.emulated.serving import GGUF, Serving, plain

# The tests write Deployment and pod status themselves, as the Deployment controller and a
# kubelet would; on a real control plane kube-controller-manager owns those (there,
# tests/e2e/test_serving_real.py serves models for real).
pytestmark = pytest.mark.emulator_only

INGRESS = {"ingress": {"host": "iris.example.com"}}


@pytest.fixture
def serving(env: Env, monkeypatch: pytest.MonkeyPatch) -> Serving:
    # A cluster whose admin lets deployments claim hosts under example.com and use the "ca"
    # ClusterIssuer (the chart's serving.ingress.allowedHosts, serving.tls.*; none by default).
    monkeypatch.setenv("ALLOWED_SERVING_HOSTS", "*.example.com")
    monkeypatch.setenv("ALLOWED_SERVING_CLUSTER_ISSUERS", "ca")
    return Serving(env)


def keys_of(serving: Serving, name: str = "iris") -> list[str]:
    secret = eventually(lambda: serving.secret(f"{name}-api-keys"))
    return base64.b64decode(secret["data"]["api-keys"]).decode().split()


def test_renders_every_child_owned_by_the_deployment(env: Env, serving: Serving) -> None:
    env.start()
    made = serving.create(endpoint=INGRESS)
    status = serving.wait_phase("Deploying")
    uid = made["metadata"]["uid"]
    children = [
        serving.deployment(),
        plain(env.core.read_namespaced_service("iris", env.ns)),
        env.config_map("iris-auth-proxy"),
        plain(serving.net.read_namespaced_network_policy("iris-auth", env.ns)),
        plain(serving.net.read_namespaced_ingress("iris", env.ns)),
        serving.secret("iris-api-keys"),
    ]
    for child in children:
        assert child is not None
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("ModelDeployment", uid, True)
    dep = children[0]
    assert dep is not None
    pod = dep["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-model"]
    assert [c["name"] for c in pod["containers"]] == ["server", "auth-proxy"]
    assert status["endpoint"] == f"http://iris.{env.ns}.svc.cluster.local:8080"
    assert status["protocol"] == "kserve-v1" and status["apiKeySecret"] == "iris-api-keys"
    assert status["apiKeys"]["count"] == 1 and status["apiKeys"]["reason"] == "Created"
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["longrun.dev/api-keys-version"] == status["apiKeys"]["version"]
    # Events are posted by a background thread: wait for them.
    eventually(lambda: {e["reason"] for e in env.events()} >= {"KeysCreated"}, timeout=15)


def test_status_follows_the_deployment_and_its_pods(env: Env, serving: Serving) -> None:
    env.start()
    serving.create()
    serving.wait_phase("Deploying")
    pull = {
        "name": "server",
        "image": "kserve/sklearnserver:v0.14.1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}},
    }
    serving.add_pod("iris", {"phase": "Pending", "containerStatuses": [pull]})
    failed = serving.wait_phase("Failed")
    assert failed["message"].startswith('cannot pull image "kserve/sklearnserver:v0.14.1"')
    eventually(
        lambda: "ImagePullBackOff" in {e["reason"] for e in env.events() if e["type"] == "Warning"},
        timeout=15,
    )
    env.core.delete_namespaced_pod("iris-abc", env.ns, grace_period_seconds=0)
    serving.set_rollout(ready=1)
    running = serving.wait_phase("Running")
    assert running["readyText"] == "1/1"
    assert serving.condition("Available")["status"] == "True"


def test_a_spec_change_rolls_the_pods_out(env: Env, serving: Serving) -> None:
    env.start()
    serving.create()
    serving.wait_phase("Deploying")
    serving.set_rollout(ready=1)
    serving.wait_phase("Running")
    before = serving.wait_deployment()
    serving.patch("iris", {"spec": {"startupTimeoutSeconds": 600}})
    after = eventually(
        lambda: (d := serving.deployment()) and d["metadata"]["generation"] == 2 and d, timeout=10
    )
    assert after["spec"]["template"] != before["spec"]["template"]
    serving.set_rollout(ready=1, updated=0)
    status = serving.wait_phase("Updating")
    assert status["observedGeneration"] == 2
    serving.set_rollout(ready=1)
    serving.wait_phase("Running")


def test_deleting_the_deployment_deletes_what_it_owns(env: Env, serving: Serving) -> None:
    env.start()
    serving.create(endpoint=INGRESS)
    serving.wait_phase("Deploying")
    serving.delete("iris")
    eventually(lambda: serving.get() is None, timeout=10)
    eventually(lambda: serving.deployment() is None, timeout=10)
    eventually(lambda: serving.secret("iris-api-keys") is None, timeout=10)
    eventually(lambda: not env.config_maps(), timeout=10)
    services = plain(env.core.list_namespaced_service(env.ns))["items"]
    assert eventually(lambda: not plain(env.core.list_namespaced_service(env.ns))["items"]) or (
        not services
    )


def test_a_rotation_request_makes_new_keys_and_rolls_the_pods(env: Env, serving: Serving) -> None:
    env.start()
    serving.create(model=GGUF, runtime={"llamacpp": {}})
    first = serving.wait_phase("Deploying")["apiKeys"]
    old = keys_of(serving)
    serving.patch("iris", {"metadata": {"annotations": {"longrun.dev/rotate-api-keys": "1"}}})
    keys = eventually(
        lambda: (k := serving.status().get("apiKeys")) and k["rotatedFor"] == "1" and k
    )
    assert keys["reason"] == "RotationRequested" and keys["version"] != first["version"]
    eventually(lambda: keys_of(serving) != old)
    dep = serving.wait_deployment()
    assert (
        dep["spec"]["template"]["metadata"]["annotations"]["longrun.dev/api-keys-version"]
        == (keys["version"])
    )


def test_a_deleted_key_secret_is_made_again_with_new_keys(env: Env, serving: Serving) -> None:
    env.start()
    serving.create()
    first = serving.wait_phase("Deploying")["apiKeys"]
    old = keys_of(serving)
    env.core.delete_namespaced_secret("iris-api-keys", env.ns)
    eventually(lambda: serving.secret("iris-api-keys") is None)
    missing = {
        "name": "server",
        "image": "kserve/sklearnserver:v0.14.1",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {
            "waiting": {
                "reason": "CreateContainerConfigError",
                "message": 'secret "iris-api-keys" not found',
            }
        },
    }
    serving.add_pod("iris", {"phase": "Pending", "containerStatuses": [missing]})
    keys = eventually(
        lambda: (k := serving.status().get("apiKeys")) and k["reason"] == "SecretMissing" and k,
        timeout=30,
    )
    assert keys["version"] != first["version"]
    eventually(lambda: keys_of(serving) != old, timeout=15)
    eventually(lambda: "KeysRotated" in {e["reason"] for e in env.events()}, timeout=15)
    # The pod still waits (no kubelet here to retry it): the status names what it lacks.
    missing_named = 'secret "iris-api-keys" not found'
    eventually(lambda: missing_named in (serving.status().get("message") or ""), timeout=15)


def test_a_secret_of_that_name_not_ours_is_left_alone(env: Env, serving: Serving) -> None:
    env.core.create_namespaced_secret(
        env.ns, {"metadata": {"name": "iris-api-keys"}, "stringData": {"api-keys": "theirs"}}
    )
    env.start()
    serving.create()
    status = serving.wait_phase("Failed")
    assert 'Secret "iris-api-keys" already exists and is not owned' in status["message"]
    secret = serving.secret("iris-api-keys")
    assert secret is not None
    assert base64.b64decode(secret["data"]["api-keys"]) == b"theirs"


def test_no_key_is_in_any_config_map_event_status_or_log(
    env: Env, serving: Serving, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    env.start()
    serving.create(auth={"keyCount": 2})
    serving.wait_phase("Deploying")
    serving.patch("iris", {"metadata": {"annotations": {"longrun.dev/rotate-api-keys": "x"}}})
    eventually(lambda: (serving.status().get("apiKeys") or {}).get("rotatedFor") == "x")
    keys = eventually(lambda: len(keys_of(serving)) == 2 and keys_of(serving))
    serving.set_rollout(ready=1)
    serving.wait_phase("Running")
    seen = [
        str(env.config_maps()),
        str(env.events()),
        str(serving.get()),
        str(serving.deployment()),
        caplog.text,
    ]
    for key in keys:
        assert all(key not in text for text in seen)
        assert all(key[4:20] not in text for text in seen)


def test_a_run_scales_an_idle_deployment_up_and_its_end_scales_it_down(
    env: Env, serving: Serving
) -> None:
    env.scripted.script(hold=True)
    env.start()
    serving.create(idleReplicas=0, replicas=2, scaleDownDelaySeconds=0)
    idle = serving.wait_phase("Idle")
    assert serving.wait_deployment(replicas=0)["spec"]["replicas"] == 0
    assert idle["activeRuns"] == []
    env.create_config(model={"deploymentRef": {"name": "iris"}, "inputName": "x"})
    env.create_run()
    serving.wait_deployment(replicas=2)
    assert eventually(lambda: serving.status().get("activeRuns")) == [f"{env.ns}/run"]
    waiting = env.wait_phase("Pending")
    assert env.condition("Accepted")["reason"] == "DeploymentNotAvailable"
    assert "waiting for ModelDeployment" in waiting["message"]
    assert env.jobs() == []
    serving.set_rollout(ready=2)
    serving.wait_phase("Running")
    job = eventually(lambda: env.jobs() and env.jobs()[0], timeout=10)
    contract = env.config_map("run-contract")["data"]["contract.json"]
    assert f'"url":"http://iris.{env.ns}.svc.cluster.local:8080"' in contract.replace(" ", "")
    envs = job["spec"]["template"]["spec"]["containers"][0].get("env") or []
    refs = [e["valueFrom"] for e in envs if "valueFrom" in e]
    mounts = str(job["spec"]["template"]["spec"].get("volumes"))
    assert "iris-api-keys" in str(refs) + mounts
    env.patch_run("run", {"spec": {"cancel": True}})
    serving.wait_deployment(replicas=0)
    serving.set_rollout(ready=0)
    idle = serving.wait_phase("Idle")
    assert idle["activeRuns"] == [] and idle["idleSince"]


def test_a_run_gives_up_when_the_deployment_stays_unavailable(env: Env, serving: Serving) -> None:
    env.start()
    serving.create()
    serving.wait_phase("Deploying")
    env.create_config(model={"deploymentRef": {"name": "iris"}})
    env.create_run(timeoutSeconds=1)
    failed = env.wait_phase("Failed", timeout=15)
    assert env.condition("Failed")["reason"] == "DeploymentNotAvailable"
    assert "gave up after spec.timeoutSeconds" in failed["message"]
    serving.set_rollout(ready=1)
    serving.wait_phase("Running")
    assert env.status()["phase"] == "Failed" and env.jobs() == []


def test_a_model_is_accepted_and_its_change_reaches_the_deployment(
    env: Env, serving: Serving
) -> None:
    model = {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "Model",
        "metadata": {"name": "iris-model"},
        "spec": {"source": "s3://models/iris/v1/model.joblib", "format": "sklearn"},
    }
    env.custom.create_namespaced_custom_object("longrun.dev", "v1alpha1", env.ns, "models", model)
    env.start()
    serving.create(model=None, modelRef={"name": "iris-model"})
    serving.wait_phase("Deploying")

    def accepted() -> bool:
        got = env.custom.get_namespaced_custom_object(
            "longrun.dev", "v1alpha1", env.ns, "models", "iris-model"
        )
        conditions = (got.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Accepted" and c["status"] == "True" for c in conditions)

    eventually(accepted)
    env.custom.patch_namespaced_custom_object(
        "longrun.dev",
        "v1alpha1",
        env.ns,
        "models",
        "iris-model",
        {"spec": {"source": "s3://models/iris/v2/model.joblib"}},
    )

    def fetches_v2() -> bool:
        dep = serving.deployment() or {}
        init = dep["spec"]["template"]["spec"]["initContainers"][0]
        return "s3://models/iris/v2/model.joblib" in init["args"]

    eventually(fetches_v2, timeout=10)


CERTIFICATES_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "certificates.cert-manager.io"},
    "spec": {
        "group": "cert-manager.io",
        "names": {"kind": "Certificate", "plural": "certificates", "singular": "certificate"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip


def test_tls_without_cert_manager_says_so_and_cert_manager_installed_later_is_found(
    env: Env, serving: Serving
) -> None:
    env.start(polling_interval=1.0)  # the resync that looks for cert-manager again
    tls = {"issuerRef": {"name": "ca", "kind": "ClusterIssuer"}}
    serving.create(endpoint={**INGRESS, "tls": tls})

    def told() -> dict[str, str] | None:
        conditions = (serving.get() or {}).get("status", {}).get("conditions") or []
        return next((c for c in conditions if c.get("reason") == "CertManagerMissing"), None)

    eventually(told, timeout=15)
    status = (serving.get() or {})["status"]
    assert "install cert-manager" in status["message"], status
    custom_api = client.ApiextensionsV1Api(env.kube.api_client())
    custom_api.create_custom_resource_definition(CERTIFICATES_CRD)

    certificate = eventually(
        lambda: env.custom.get_namespaced_custom_object(
            "cert-manager.io", "v1", env.ns, "certificates", "iris"
        ),
        timeout=30,
    )
    assert certificate["spec"]["issuerRef"]["name"] == "ca"
    assert certificate["metadata"]["ownerReferences"][0]["kind"] == "ModelDeployment"
    eventually(lambda: told() is None, timeout=15)
