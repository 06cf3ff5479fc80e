"""Serving across namespaces, on both backends: a run of a namespace that another namespace's
on-demand deployment does not allow scales nothing and is never listed as using it; an allowed
one scales it up, and stops counting as soon as it is cancelled or its namespace is taken off
the list; a Model shared from another namespace is pinned at the version the deployment
accepted, and a change of it waits (ModelCurrent, a Warning event) until the deployment's owner
accepts it.

Real: the backend (the API emulator, or kube-apiserver, etcd and kube-controller-manager with
LONGRUN_KUBE_BACKEND=real), the official client, the whole controller (both adapters, both
reconcilers, the work queue). Faked: nothing: no Deployment or pod status is written by the
test. The deployments stay without a ready pod (on the real backend their pods, in a namespace
no node agent serves, stay unscheduled), which is all these rules need: replicas and
activeRuns, the pod template, conditions and events.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from e2e.fixtures import eventually
from tests.controller.emulated.harness import GROUP, VERSION, Env
from tests.controller.emulated.serving import SKLEARN, plain

Obj = dict[str, Any]
PATIENCE = 60.0  # a real control plane, a loaded machine
KEY_COPY = {"secretRef": {"name": "iris-key", "key": "api-key"}}


def create(env: Env, namespace: str, plural: str, kind: str, name: str, spec: Obj) -> Obj:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
    return env.custom.create_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, namespace, plural, {**body, "spec": spec}
    )


def patch(env: Env, namespace: str, plural: str, name: str, body: Obj) -> Obj:
    return env.custom.patch_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, namespace, plural, name, body
    )


def get(env: Env, namespace: str, plural: str, name: str) -> Obj:
    return env.custom.get_namespaced_custom_object(  # type: ignore[no-any-return]
        GROUP, VERSION, namespace, plural, name
    )


def deployment_of(env: Env, namespace: str, name: str = "iris") -> Obj | None:
    try:
        return plain(client.AppsV1Api(env.kube.api_client()).read_namespaced_deployment(
            name, namespace))  # fmt: skip
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def on_demand(env: Env, namespace: str, *, allowed: list[str]) -> None:
    """team-b's iris: 3 pods while runs use it, none otherwise, no delay."""
    spec = {
        "model": SKLEARN,
        "runtime": {"kserve": {"protocol": "v1"}},
        "replicas": 3,
        "idleReplicas": 0,
        "scaleDownDelaySeconds": 0,
        "allowedNamespaces": allowed,
    }
    create(env, namespace, "modeldeployments", "ModelDeployment", "iris", spec)


def scale(env: Env, namespace: str) -> tuple[int | None, list[str]]:
    """The Deployment's replicas and the ModelDeployment's status.activeRuns."""
    dep = deployment_of(env, namespace)
    replicas = None if dep is None else int(dep["spec"].get("replicas", 1))
    status = get(env, namespace, "modeldeployments", "iris").get("status") or {}
    return replicas, list(status.get("activeRuns") or [])


def use_from_tenant(env: Env, team_b: str, run: str = "hog") -> None:
    """A config and a run in the test's namespace calling team-b's iris."""
    ref = {"name": "iris", "namespace": team_b}
    env.create_config(model={"deploymentRef": ref, "inputName": "x", "auth": KEY_COPY})
    env.create_run(run)


def test_a_refused_run_never_scales_another_namespaces_deployment(env: Env) -> None:
    env.start(polling_interval=1.0)  # resyncs too must not count it
    team_b = env.kube.namespace("team-b")
    on_demand(env, team_b, allowed=["team-c"])
    eventually(lambda: scale(env, team_b) == (0, []), timeout=PATIENCE)
    use_from_tenant(env, team_b)

    eventually(lambda: env.condition("Accepted", "hog").get("reason") == "DeploymentNotAllowed")

    for _ in range(3):  # a few resyncs later, still nothing
        env.settle()
        assert scale(env, team_b) == (0, [])
    assert "modelDeployment" not in env.status("hog")
    assert get(env, team_b, "modeldeployments", "iris")["status"]["replicas"] == 0


def test_an_allowed_run_scales_it_up_until_it_is_cancelled_or_its_namespace_removed(
    env: Env,
) -> None:
    env.start()
    team_b = env.kube.namespace("team-b")
    on_demand(env, team_b, allowed=[env.ns])
    eventually(lambda: scale(env, team_b) == (0, []), timeout=PATIENCE)
    use_from_tenant(env, team_b, "first")

    eventually(lambda: scale(env, team_b) == (3, [f"{env.ns}/first"]), timeout=PATIENCE)
    assert env.status("first")["modelDeployment"] == f"{team_b}/iris"
    env.patch_run("first", {"spec": {"cancel": True}})
    eventually(lambda: scale(env, team_b) == (0, []), timeout=PATIENCE)

    env.create_run("second")
    eventually(lambda: scale(env, team_b) == (3, [f"{env.ns}/second"]), timeout=PATIENCE)
    patch(env, team_b, "modeldeployments", "iris", {"spec": {"allowedNamespaces": ["team-c"]}})
    eventually(lambda: scale(env, team_b) == (0, []), timeout=PATIENCE)
    eventually(lambda: env.condition("Accepted", "second").get("reason") == "DeploymentNotAllowed")


V1 = "s3://models/iris/v1/model.joblib"
V2 = "s3://models/iris/v2/model.joblib"


def fetches(env: Env) -> str | None:
    """The source the deployment's pods download."""
    dep = deployment_of(env, env.ns)
    if dep is None:
        return None
    return str(dep["spec"]["template"]["spec"]["initContainers"][0]["args"][0])


def model_current(env: Env) -> Obj:
    status = get(env, env.ns, "modeldeployments", "iris").get("status") or {}
    found = [c for c in status.get("conditions") or [] if c["type"] == "ModelCurrent"]
    return found[0] if found else {}


def test_a_shared_model_change_waits_until_the_deployment_accepts_it(env: Env) -> None:
    env.start()
    team_b = env.kube.namespace("team-b")
    model = {"source": V1, "format": "sklearn", "allowedNamespaces": [env.ns]}
    create(env, team_b, "models", "Model", "iris", model)
    spec = {
        "modelRef": {"name": "iris", "namespace": team_b},
        "runtime": {"kserve": {"protocol": "v1"}},
        "replicas": 1,
        "idleReplicas": 0,
    }
    create(env, env.ns, "modeldeployments", "ModelDeployment", "iris", spec)
    eventually(lambda: fetches(env) == V1, timeout=PATIENCE)
    eventually(lambda: model_current(env).get("reason") == "Accepted", timeout=PATIENCE)

    patch(env, team_b, "models", "iris", {"spec": {"source": V2}})

    waiting = eventually(
        lambda: (c := model_current(env)).get("reason") == "ModelChangeNotAccepted" and c,
        timeout=PATIENCE,
    )
    assert waiting["status"] == "False"
    assert "set spec.modelRef.generation: 2 on this deployment" in waiting["message"]
    eventually(
        lambda: (
            "ModelChangeNotAccepted"
            in {e["reason"] for e in env.events() if e["type"] == "Warning"}
        ),
        timeout=PATIENCE,
    )
    env.settle()
    assert fetches(env) == V1
    status = get(env, env.ns, "modeldeployments", "iris")["status"]
    assert status["acceptedModel"]["generation"] == 1
    assert status["acceptedModel"]["spec"]["source"] == V1

    patch(env, env.ns, "modeldeployments", "iris", {"spec": {"modelRef": {"generation": 2}}})

    eventually(lambda: fetches(env) == V2, timeout=PATIENCE)
    eventually(lambda: model_current(env).get("reason") == "Accepted", timeout=PATIENCE)
    assert (
        get(env, env.ns, "modeldeployments", "iris")["status"]["acceptedModel"]["generation"] == 2
    )
