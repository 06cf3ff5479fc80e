"""PodSecurity "restricted" on both backends: every runner pod admitted, violations refused alike.

Real: both backends' PodSecurity admission (kube-apiserver's plugin, or the emulator's
e2e/emulator/podsecurity.py) in namespaces labelled
`pod-security.kubernetes.io/enforce=restricted`; the runner pods are built by the
controller's own pure code (controller/core: resolve, build_job, build_cron_job) from every
example under testdata/examples, and created as Pods; the Job controllers (kube-controller-
manager's, or the emulator's) for the refused Job. Faked: a ModelDeployment's status (no
model server runs), so that a config's deploymentRef resolves as it does once serving works.
The model servers' pods (controller/core/serving: decide_deployment) are checked the same way.
The expected refusals are the real server's words (v1.36.2).
"""

from __future__ import annotations

import copy
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controller.core.builders import Resolved, build_cron_job, build_job
from controller.core.resolve import parse_run_spec, resolve
from controller.core.serving.decide import Create, decide_deployment
from controller.core.serving.observed import ServingObserved
from controller.core.settings import Settings
from e2e.backends import KubeHandle
from e2e.fixtures import eventually
from tests.controller.unit.serving.objects import example_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "testdata" / "examples").rglob("*.yaml"))
# iris-scorer: the ServiceAccount of testdata/examples/tokens, which its header tells the
# operator to allow (runner.allowedServiceAccounts).
SETTINGS = Settings(allowed_images=("*",), allowed_pod_labels=("*",),
                    allowed_pod_annotations=("*",), allowed_tolerations=("*",),
                    allowed_service_accounts=("iris-scorer",))  # fmt: skip
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
NOW = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
Obj = dict[str, Any]


def _available(deployment: Obj) -> Obj:
    """A ModelDeployment as its controller reports it once it serves."""
    return {**deployment, "status": {
        "phase": "Running", "endpoint": "http://model.serving.svc:8080", "protocol": "openai-chat",
        "modelName": "model",
        "conditions": [{"type": "Available", "status": "True", "reason": "Serving"}]}}  # fmt: skip


def runner_templates() -> list[tuple[str, Obj]]:
    """(example/run, the pod template of the Job the controller would create) for every run."""
    found = []
    for path in EXAMPLES:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            doc["metadata"].setdefault("namespace", "examples")
            doc["metadata"].update(uid="uid-1", generation=1)
        by_kind = {(d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs}
        for run in (d for d in docs if d["kind"] == "InferenceRun"):
            spec, problem = parse_run_spec(run)
            assert spec is not None, problem
            resolved = _resolve(run, spec, by_kind)
            assert isinstance(resolved, Resolved), (path, resolved)
            if spec.is_scheduled:
                job = build_cron_job(resolved, SETTINGS)["spec"]["jobTemplate"]
            else:
                job = build_job(resolved, SETTINGS)
            found.append((f"{path.parent.name}/{run['metadata']['name']}", job["spec"]["template"]))
    return found


def _resolve(run: Obj, spec: Any, by_kind: dict[tuple[str, str, str], Obj]) -> Any:
    def config(ns: str, name: str) -> Obj | None:
        return by_kind.get(("InferenceConfig", ns, name))

    def deployment(ns: str, name: str) -> Obj | None:
        return _deployment(by_kind, ns, name)

    return resolve(run, spec, lookup=config, settings=SETTINGS, deployments=deployment)


def _deployment(by_kind: dict[tuple[str, str, str], Obj], ns: str, name: str) -> Obj | None:
    deployment = by_kind.get(("ModelDeployment", ns, name))
    if deployment is None and (fleet := by_kind.get(("InferenceModel", ns, name))) is not None:
        return _ready_fleet(fleet)  # a deploymentRef of kind InferenceModel (examples/fleet)
    return _available(deployment) if deployment else None


def _ready_fleet(model: Obj) -> Obj:
    """An InferenceModel as its controller reports it once a replica is ready."""
    ready = [{"type": "Available", "status": "True", "reason": "ReplicaReady"}]
    return {**model, "status": {
        "phase": "Ready", "endpoint": "http://model.serving.svc:8080", "protocol": "openai-chat",
        "modelName": "model", "conditions": ready}}  # fmt: skip


def server_templates() -> list[tuple[str, Obj]]:
    """(example/deployment, the model server's pod template) for every ModelDeployment."""
    found = []
    for path in sorted((ROOT / "testdata" / "examples" / "serving").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        models = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Model"}
        for doc in (d for d in docs if d["kind"] == "ModelDeployment"):
            doc["metadata"].update(namespace="examples", uid="uid-1", generation=1)
            ref = (doc["spec"].get("modelRef") or {}).get("name")
            observed = ServingObserved(doc, model=models.get(ref))
            settings = example_settings(path.name)  # what the example asks the admin to allow
            decision = decide_deployment(observed, settings, now=NOW, entropy=os.urandom)
            for write in decision.writes:
                if isinstance(write, Create) and write.kind == "Deployment":
                    name = f"{path.stem}/{doc['metadata']['name']}"
                    found.append((name, write.body["spec"]["template"]))
    return found


TEMPLATES = runner_templates()
SERVERS = server_templates()


@pytest.fixture
def restricted(kube_each_backend: KubeHandle) -> tuple[KubeHandle, str, Any]:
    """A namespace that enforces "restricted", and a CoreV1Api on it."""
    handle = kube_each_backend
    handle.require_controllers()  # the namespace's `default` ServiceAccount, the Job controller
    ns = handle.namespace("psa")
    core: Any = client.CoreV1Api(handle.api_client())
    core.patch_namespace(ns, {"metadata": {"labels": RESTRICTED}})
    return handle, ns, core


def _pod(name: str, template: Obj) -> Obj:
    meta = template.get("metadata") or {}
    return {"metadata": {"name": name, "labels": meta.get("labels") or {}},
            "spec": copy.deepcopy(template["spec"])}  # fmt: skip


def _refusal(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    return int(caught.value.status or 0), json.loads(caught.value.body or "{}")["message"]


def test_every_example_has_a_runner_pod_to_check() -> None:
    assert len(TEMPLATES) >= 7, [name for name, _ in TEMPLATES]


def test_every_runner_pod_of_every_example_is_admitted_under_restricted(
    restricted: tuple[KubeHandle, str, Any],
) -> None:
    _, ns, core = restricted
    refused = {}
    accounts = {t["spec"].get("serviceAccountName") for _, t in TEMPLATES} - {None}
    for account in sorted(accounts):  # the examples' own (kube-apiserver looks them up)
        core.create_namespaced_service_account(ns, {"metadata": {"name": account}})
    for i, (name, template) in enumerate(TEMPLATES):
        try:
            core.create_namespaced_pod(ns, _pod(f"runner-{i}", template))
        except ApiException as exc:
            refused[name] = json.loads(exc.body or "{}")["message"]
    assert refused == {}


def test_every_model_server_pod_of_every_serving_example_is_admitted_under_restricted(
    restricted: tuple[KubeHandle, str, Any],
) -> None:
    _, ns, core = restricted
    assert len(SERVERS) >= 5, [name for name, _ in SERVERS]
    api = core.api_client
    url = f"{api.configuration.host}/api/v1/namespaces/{ns}/pods"
    refused = {}
    for i, (name, template) in enumerate(SERVERS):
        # As JSON over the wire: the client's models refuse `nvidia.com/gpu: 1` (an int), which
        # the API server takes as the quantity it is.
        body = json.dumps(_pod(f"server-{i}", template))
        resp = api.rest_client.pool_manager.request(
            "POST", url, body=body, headers={"Content-Type": "application/json"}, timeout=30
        )
        if resp.status != 201:
            refused[name] = json.loads(resp.data)["message"]
    assert refused == {}


def test_a_runner_pod_that_allows_privilege_escalation_is_refused_with_the_real_message(
    restricted: tuple[KubeHandle, str, Any],
) -> None:
    _, ns, core = restricted
    pod = _pod("escalating", TEMPLATES[0][1])
    container = pod["spec"]["containers"][0]
    container["securityContext"]["allowPrivilegeEscalation"] = True
    assert _refusal(lambda: core.create_namespaced_pod(ns, pod)) == (
        403,
        'pods "escalating" is forbidden: violates PodSecurity "restricted:latest": '
        f'allowPrivilegeEscalation != false (container "{container["name"]}" must set '
        "securityContext.allowPrivilegeEscalation=false)",
    )


MANY = {
    "hostNetwork": True, "hostPID": True,
    "securityContext": {"runAsUser": 0, "runAsNonRoot": False,
                        "seccompProfile": {"type": "Unconfined"}},
    "volumes": [{"name": "h", "hostPath": {"path": "/tmp"}},
                {"name": "g", "gitRepo": {"repository": "x"}}, {"name": "e", "emptyDir": {}}],
    "initContainers": [{"name": "i", "image": "busybox", "securityContext": {
        "privileged": True, "capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}}}],
    "containers": [
        {"name": "c", "image": "busybox",
         "ports": [{"containerPort": 80, "hostPort": 80}, {"containerPort": 81, "hostPort": 81}],
         "securityContext": {"allowPrivilegeEscalation": True, "runAsUser": 0,
                             "runAsNonRoot": False, "seccompProfile": {"type": "Unconfined"},
                             "capabilities": {"drop": ["ALL"], "add": ["NET_RAW"]}}},
        {"name": "d", "image": "busybox", "ports": [{"containerPort": 82, "hostPort": 82}]},
    ],
}  # fmt: skip
MANY_MESSAGE = (
    'pods "many" is forbidden: violates PodSecurity "restricted:latest": host namespaces '
    '(hostNetwork=true, hostPID=true), hostPort (containers "c", "d" use hostPorts 80, 81, 82), '
    'privileged (container "i" must not set securityContext.privileged=true), '
    'allowPrivilegeEscalation != false (containers "i", "c", "d" must set '
    "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (containers "
    '"i", "d" must set securityContext.capabilities.drop=["ALL"]; containers "i", "c" must not '
    'include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add), restricted volume '
    'types (volumes "h", "g" use restricted volume types "gitRepo", "hostPath"), runAsNonRoot '
    '!= true (pod and container "c" must not set securityContext.runAsNonRoot=false), '
    'runAsUser=0 (pod and container "c" must not set runAsUser=0), seccompProfile (pod and '
    'container "c" must not set securityContext.seccompProfile.type to "Unconfined")'
)


def test_every_failed_check_is_named_in_one_refusal_in_the_real_order(
    restricted: tuple[KubeHandle, str, Any],
) -> None:
    _, ns, core = restricted
    body = {"metadata": {"name": "many"}, "spec": MANY}
    assert _refusal(lambda: core.create_namespaced_pod(ns, body)) == (403, MANY_MESSAGE)


def test_a_violating_job_is_created_with_a_warning_and_gets_failed_create_and_no_pod(
    restricted: tuple[KubeHandle, str, Any],
) -> None:
    handle, ns, core = restricted
    batch: Any = client.BatchV1Api(handle.api_client())
    template = copy.deepcopy(TEMPLATES[0][1])
    template["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    job = {"metadata": {"name": "escalating"}, "spec": {"backoffLimit": 0, "template": template}}
    _, status, headers = batch.create_namespaced_job_with_http_info(ns, job)
    assert status == 201
    assert 'would violate PodSecurity \\"restricted:latest\\"' in headers.get("Warning", "")

    def failed_create() -> list[str]:
        events = core.list_namespaced_event(ns).items
        return [e.message for e in events if e.reason == "FailedCreate"]

    message = eventually(failed_create, timeout=60, interval=0.2)[0]
    assert message.startswith('Error creating: pods "escalating-'), message
    assert (
        'is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation'
        in message
    )
    assert core.list_namespaced_pod(ns).items == []


def test_a_placed_gpu_server_pod_is_admitted_with_its_priority_and_runtime_class(
    restricted: tuple[KubeHandle, str, Any],
) -> None:
    # Issue 29's placement fields as the builders render them (affinity, spread constraints,
    # priority and runtime class, another accelerator resource, /dev/shm), taken by the real
    # server's validation and admission (Priority, RuntimeClass) under "restricted". The
    # emulator serves neither PriorityClasses nor RuntimeClasses: there the pod names none.
    handle, ns, core = restricted
    api = core.api_client
    host = api.configuration.host
    created = [
        ("/apis/scheduling.k8s.io/v1/priorityclasses",
         {"metadata": {"name": f"{ns}-inference"}, "value": 1000}),
        ("/apis/node.k8s.io/v1/runtimeclasses",
         {"metadata": {"name": f"{ns}-gpu"}, "handler": "runc"}),
    ] if handle.backend == "real" else []  # fmt: skip
    try:
        _admits_a_placed_pod(api, host, ns, created)
    finally:
        for path, body in created:
            api.rest_client.pool_manager.request(
                "DELETE", f"{host}{path}/{body['metadata']['name']}"
            )


def _admits_a_placed_pod(api: Any, host: str, ns: str, created: list[tuple[str, Obj]]) -> None:
    from controller.core.serving.settings import ServingSettings
    from tests.controller.unit.serving.test_placement import AFFINITY, SPREAD

    for path, body in created:
        resp = api.rest_client.pool_manager.request(
            "POST", host + path, body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        assert resp.status == 201, resp.data
    doc = {
        "metadata": {"name": "placed", "namespace": "examples", "uid": "uid-1", "generation": 1},
        "spec": {
            "model": {"source": "hf://org/chat@main", "format": "hf"},
            "runtime": {"vllm": {"maxModelLen": 4096}},
            "resources": {"gpu": 2, "memory": "16Gi", "gpuResource": "amd.com/gpu"},
            "affinity": AFFINITY,
            "topologySpreadConstraints": [SPREAD],
        },
    }
    settings = ServingSettings(
        allowed_priority_classes=("*-inference",),
        allowed_runtime_classes=("*-gpu",),
        allowed_affinity_keys=("*",),
        allowed_gpu_resources=("amd.com/gpu",),
    )
    if created:
        doc["spec"].update(priorityClassName=f"{ns}-inference", runtimeClassName=f"{ns}-gpu")
    decision = decide_deployment(ServingObserved(doc), settings, now=NOW, entropy=os.urandom)
    (template,) = [
        w.body["spec"]["template"]
        for w in decision.writes
        if isinstance(w, Create) and w.kind == "Deployment"
    ]
    resp = api.rest_client.pool_manager.request(
        "POST",
        f"{host}/api/v1/namespaces/{ns}/pods",
        body=json.dumps(_pod("placed", template)),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 201, json.loads(resp.data)["message"]
    pod = json.loads(resp.data)["spec"]
    assert pod["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "2"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    if created:
        assert pod["priority"] == 1000  # the Priority admission plugin resolved the class
        assert pod["runtimeClassName"] == f"{ns}-gpu"
