"""A ModelDeployment that names a catalog entry: lazy registration of its Model, on both
backends.

Real: the backend (the API emulator, or kube-apiserver with the generated CRDs and their
CEL rules when LONGRUN_KUBE_BACKEND=real), the official client, the whole controller (the
serving adapter, reconciler and work queue) reading the catalog ConfigMap and creating the
Model, Events. Faked: the Deployment controller and the kubelet in the one test that goes on
to Running (emulator only): it writes the Deployment's rollout status itself, as
tests/controller/emulated/test_serving.py does; tests/e2e/test_catalog_real.py serves a
catalog model for real on the real control plane.
"""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client

from e2e.fixtures import eventually
from tests.controller.emulated.harness import GROUP, VERSION, Env, Obj
from tests.controller.emulated.serving import Serving, plain

CATALOG = {
    "models": [
        {
            "name": "iris",
            "task": "predict",
            "size": "1Mi",
            "source": "s3://models/iris/model.joblib",
            "format": "sklearn",
            "variants": {"cpu": {}},
        },
        {
            "name": "chat",
            "task": "chat-completion",
            "variants": {
                "cpu": {"source": "hf://org/chat-GGUF/chat.Q4_K_M.gguf@main", "format": "gguf"},
                "gpu": {"source": "hf://org/chat@main", "format": "hf"},
            },
        },
    ]
}
KSERVE = {"kserve": {"protocol": "v1"}}


@pytest.fixture
def serving(env: Env, monkeypatch: pytest.MonkeyPatch) -> Serving:
    monkeypatch.setenv("SERVING_CATALOG", f"{env.ns}/model-catalog")
    env.core.create_namespaced_config_map(
        env.ns,
        {"metadata": {"name": "model-catalog"}, "data": {"catalog.yaml": yaml.safe_dump(CATALOG)}},
    )
    return Serving(env)


def model(env: Env, name: str) -> Obj | None:
    try:
        found: Obj = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "models", name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def events(env: Env, reason: str) -> list[Obj]:
    return [e for e in env.events() if e.get("reason") == reason]


def test_a_catalog_name_creates_its_model_and_says_so_in_an_event(
    env: Env, serving: Serving
) -> None:
    env.start()
    serving.create(model={"catalog": {"name": "iris"}}, runtime=KSERVE)

    made = eventually(lambda: model(env, "iris"), timeout=30)
    assert made is not None

    assert made["spec"] == {"source": "s3://models/iris/model.joblib", "format": "sklearn",
                            "task": "predict"}  # fmt: skip
    assert made["metadata"]["labels"]["longrun.dev/catalog-entry"] == "iris"
    assert made["metadata"]["annotations"]["longrun.dev/catalog-compute"] == "cpu"
    assert not made["metadata"].get("ownerReferences")  # the namespace's, not the deployment's
    serving.wait_phase("Deploying")
    (event,) = eventually(lambda: events(env, "ModelRegistered"), timeout=15)
    assert event["involvedObject"]["name"] == "iris"
    assert 'created Model "iris" from the cpu variant' in event["message"]
    assert serving.wait_deployment() is not None


def test_a_model_already_there_is_served_as_it_is(env: Env, serving: Serving) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "iris"},
            "spec": {"source": "s3://models/mine/model.joblib", "format": "sklearn"}}  # fmt: skip
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "models", body)
    env.start()
    serving.create(model={"catalog": {"name": "iris"}}, runtime=KSERVE)

    dep = serving.wait_deployment()

    init = dep["spec"]["template"]["spec"]["initContainers"][0]
    assert "s3://models/mine/model.joblib" in " ".join(init.get("args") or [])
    assert model(env, "iris")["spec"]["source"] == "s3://models/mine/model.joblib"  # type: ignore[index]
    assert not events(env, "ModelRegistered")


def test_the_runtime_picks_the_variant_whose_format_it_serves(env: Env, serving: Serving) -> None:
    env.start()
    serving.create("chat", model={"catalog": {"name": "chat"}}, runtime={"llamacpp": {}})

    made = eventually(lambda: model(env, "chat"), timeout=30)
    assert made is not None

    assert made["spec"]["format"] == "gguf"
    assert made["metadata"]["annotations"]["longrun.dev/catalog-compute"] == "cpu"


def test_an_unknown_catalog_name_fails_naming_it_and_the_config_map(
    env: Env, serving: Serving
) -> None:
    env.start()
    serving.create(model={"catalog": {"name": "nope"}}, runtime=KSERVE)

    failed = serving.wait_phase("Failed")

    assert failed["message"] == (
        f'spec.model.catalog: no entry "nope" in the model catalog (ConfigMap '
        f'"{env.ns}/model-catalog"): `longrun catalog list` shows the aliases'
    )
    reasons = {c.get("reason") for c in failed["conditions"]}
    assert "CatalogEntryNotFound" in reasons
    eventually(lambda: events(env, "CatalogEntryNotFound"), timeout=15)
    assert model(env, "nope") is None


def test_a_catalog_fixed_later_is_read_again_at_the_next_resync(env: Env, serving: Serving) -> None:
    env.start(polling_interval=1.0)
    serving.create(model={"catalog": {"name": "later"}}, runtime=KSERVE)
    serving.wait_phase("Failed")
    later = {**CATALOG["models"][0], "name": "later"}
    added = {"models": [*CATALOG["models"], later]}
    env.core.patch_namespaced_config_map(
        "model-catalog", env.ns, {"data": {"catalog.yaml": yaml.safe_dump(added)}}
    )

    eventually(lambda: model(env, "later"), timeout=30)

    serving.wait_phase("Deploying")


def test_with_lazy_registration_off_the_deployment_says_to_create_the_model(
    env: Env, serving: Serving, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVING_CATALOG_LAZY", "false")
    env.start()
    serving.create(model={"catalog": {"name": "iris"}}, runtime=KSERVE)

    failed = serving.wait_phase("Failed")

    assert "lazy registration from the catalog is off: create the Model" in failed["message"]
    assert "catalog.lazyRegistration" in failed["message"]
    eventually(lambda: events(env, "LazyRegistrationOff"), timeout=15)
    assert model(env, "iris") is None


def test_the_api_server_refuses_a_catalog_name_beside_a_source(env: Env) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelDeployment",
            "metadata": {"name": "both"},
            "spec": {"model": {"catalog": {"name": "iris"}, "source": "s3://models/a/m.joblib"},
                     "runtime": KSERVE}}  # fmt: skip
    with pytest.raises(client.ApiException) as caught:
        env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "modeldeployments", body)
    assert caught.value.status == 422
    assert "set exactly one of catalog and source" in str(caught.value.body)


@pytest.mark.emulator_only  # the test plays the Deployment controller (see the docstring)
def test_a_deployment_naming_a_catalog_model_reaches_running(env: Env, serving: Serving) -> None:
    env.start()
    serving.create(model={"catalog": {"name": "iris"}}, runtime=KSERVE)
    eventually(lambda: model(env, "iris"), timeout=30)
    serving.wait_phase("Deploying")

    serving.set_rollout(ready=1)

    running = serving.wait_phase("Running")
    assert running["readyText"] == "1/1"
    assert plain(running)["modelName"] == "iris"
