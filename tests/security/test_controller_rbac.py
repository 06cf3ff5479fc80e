"""The controller under the chart's RBAC, with a ServiceAccount token, on both backends.

Real: Helm's render of the chart (its ServiceAccount, ClusterRole or per-namespace Roles,
bindings, and the Deployment's env), `kubectl create token`, the controller as a process
(`python -m controller controller`) authenticated only by that token, and each backend's
RBAC authorizer (kube-apiserver's, or the emulator's e2e/emulator/rbac.py). Faked: nothing;
on the real backend no pod runs (no kubelet), which these tests do not need: a run counts as
reconciled once its ConfigMap and Job (a scheduled run's CronJob) exist and its status names
them, and a ModelDeployment naming a catalog entry once its Model exists (read from the chart's
catalog ConfigMap in the release namespace) and it is Deploying.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.backends import KubeHandle
from e2e.fixtures import eventually
from tests.security.chart_rbac import (
    Rendered,
    apply,
    remove_cluster_scoped,
    render,
    token_kubeconfig,
)
from tests.security.controller import ControllerProcess

GROUP, VERSION = "longrun.dev", "v1alpha1"
CONFIG_SPEC = {
    "model": {"protocol": "kserve-v1", "url": "http://iris.models.svc:8080", "name": "iris",
              "inputFields": ["x"]},
    "storage": {"input": {"file": {"path": "/data/in.jsonl", "idField": "id"}},
                "output": {"file": {"path": "/data/out"}}},
}  # fmt: skip
Obj = dict[str, Any]
PATIENCE = 60.0  # seconds; a loaded 2-core machine, the real Job controller


class Release:
    """One install of the chart's RBAC on a backend, and a namespace for runs."""

    def __init__(self, handle: KubeHandle, *, namespaced: bool) -> None:
        self.handle = handle
        self.api = handle.api_client()
        self.system = handle.namespace("lr-system")
        self.runs = handle.namespace("lr-runs")
        values = {"controller": {"watchNamespaces": [self.runs]}} if namespaced else {}
        self.rendered = render(self.system, self.system, values)
        self._cluster_scoped: list[tuple[str, str]] = []

    def install(self, rendered: Rendered | None = None) -> None:
        self._cluster_scoped = apply(self.api, rendered or self.rendered)

    def token(self) -> str:
        done = self.handle.kubectl(
            "create", "token", self.rendered.service_account, "-n", self.system
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start_controller(self, workdir: Path) -> ControllerProcess:
        kubeconfig = token_kubeconfig(
            self.handle.kubeconfig_path, self.token(), workdir / "token-kubeconfig", self.system
        )
        controller = ControllerProcess(kubeconfig, self.rendered.env, workdir / "controller.log")
        controller.wait_ready()
        return controller

    def create_run(self, *, scheduled: bool = False) -> None:
        """The config `cfg` and the one-shot run `run` (and the scheduled run `nightly`)."""
        custom = client.CustomObjectsApi(self.api)
        runs: list[tuple[str, Obj]] = [("run", {"configRef": {"name": "cfg"}})]
        if scheduled:
            runs.append(("nightly", {"configRef": {"name": "cfg"}, "schedule": "0 2 * * *"}))
        for kind, plural, name, spec in (
            ("InferenceConfig", "inferenceconfigs", "cfg", CONFIG_SPEC),
            *(("InferenceRun", "inferenceruns", name, spec) for name, spec in runs),
        ):
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name},
                    "spec": spec}  # fmt: skip
            custom.create_namespaced_custom_object(GROUP, VERSION, self.runs, plural, body)

    def run_status(self, name: str = "run") -> Obj:
        custom: Any = client.CustomObjectsApi(self.api)
        run = custom.get_namespaced_custom_object(GROUP, VERSION, self.runs, "inferenceruns", name)
        return dict(run.get("status") or {})

    def cron_jobs(self) -> list[str]:
        batch: Any = client.BatchV1Api(self.api)
        return [c.metadata.name for c in batch.list_namespaced_cron_job(self.runs).items]

    def children(self) -> tuple[list[str], list[str]]:
        """Names of the ConfigMaps (not the root CA's) and Jobs in the runs' namespace."""
        core: Any = client.CoreV1Api(self.api)
        batch: Any = client.BatchV1Api(self.api)
        maps = [m.metadata.name for m in core.list_namespaced_config_map(self.runs).items]
        jobs = [j.metadata.name for j in batch.list_namespaced_job(self.runs).items]
        return [m for m in maps if m != "kube-root-ca.crt"], jobs

    def close(self) -> None:
        remove_cluster_scoped(self.api, self._cluster_scoped)


@pytest.fixture(params=["cluster-wide", "watch-namespaces"])
def release(request: pytest.FixtureRequest, kube_each_backend: KubeHandle) -> Iterator[Release]:
    kube_each_backend.require_controllers()  # ServiceAccount tokens and the Job controller
    rel = Release(kube_each_backend, namespaced=request.param == "watch-namespaces")
    yield rel
    rel.close()


def _reconciled(rel: Release) -> Obj | None:
    """Both runs reconciled: the one-shot's ConfigMap and Job, the scheduled one's CronJob,
    each named in its run's status."""
    status, nightly = rel.run_status(), rel.run_status("nightly")
    maps, jobs = rel.children()
    done = status.get("jobName") in jobs and status.get("configMapName") in maps
    return status if done and nightly.get("cronJobName") in rel.cron_jobs() else None


def _wait_reconciled(rel: Release, controller: ControllerProcess) -> Obj:
    """The run's status once reconciled; fails at the first 403 the controller logs."""
    deadline = time.monotonic() + PATIENCE
    while True:
        assert controller.refusals() == [], "\n".join(controller.refusals()[:3])
        status = _reconciled(rel)
        if status:
            return status
        assert time.monotonic() < deadline, f"not reconciled in {PATIENCE}s: {rel.run_status()}"
        time.sleep(0.2)


def test_controller_reconciles_a_run_under_the_charts_rbac_with_no_403(
    release: Release, tmp_path: Path
) -> None:
    release.install()
    controller = release.start_controller(tmp_path)
    try:
        release.create_run(scheduled=True)
        status = _wait_reconciled(release, controller)
    finally:
        code = controller.stop()
    assert controller.refusals() == [], "\n".join(controller.refusals()[:3])
    assert code == 0, controller.text()[-3000:]
    assert status["phase"], status


def _refused(controller: ControllerProcess, resource: str) -> list[str]:
    return [line for line in controller.refusals() if f'resource \\"{resource}\\"' in line]


def test_a_role_without_create_on_jobs_leaves_the_run_without_a_job_and_logs_the_403(
    release: Release, tmp_path: Path
) -> None:
    release.install(release.rendered.without_verb("jobs", "create"))
    controller = release.start_controller(tmp_path)
    try:
        release.create_run()
        refused = eventually(lambda: _refused(controller, "jobs"), timeout=PATIENCE, interval=0.2)
        jobs = release.children()[1]
    finally:
        controller.stop()
    assert 'cannot create resource \\"jobs\\" in API group \\"batch\\"' in refused[0], refused
    assert jobs == []


def test_a_role_without_patch_on_run_status_leaves_the_status_unwritten_and_logs_the_403(
    release: Release, tmp_path: Path
) -> None:
    release.install(release.rendered.without_verb("inferenceruns/status", "patch"))
    controller = release.start_controller(tmp_path)
    try:
        release.create_run()
        refused = eventually(
            lambda: _refused(controller, "inferenceruns/status"), timeout=PATIENCE, interval=0.2
        )
        status = release.run_status()
    finally:
        controller.stop()
    assert 'cannot patch resource \\"inferenceruns/status\\"' in refused[0], refused
    assert status == {}


CATALOG = """\
models:
  - name: iris
    source: s3://models/iris/model.joblib
    format: sklearn
    variants: {cpu: {}}
"""


def test_controller_creates_a_catalog_model_under_the_charts_rbac_with_no_403(
    release: Release, tmp_path: Path
) -> None:
    release.install()
    namespace, name = release.rendered.env["SERVING_CATALOG"].split("/")
    assert namespace == release.system  # the chart's ConfigMap, in the release namespace
    core: Any = client.CoreV1Api(release.api)
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": name}, "data": {"catalog.yaml": CATALOG}}
    )
    custom: Any = client.CustomObjectsApi(release.api)
    spec = {"model": {"catalog": {"name": "iris"}}, "runtime": {"kserve": {}}}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelDeployment",
            "metadata": {"name": "iris"}, "spec": spec}  # fmt: skip
    controller = release.start_controller(tmp_path)
    try:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, release.runs, "modeldeployments", body
        )

        def deploying() -> Obj | None:
            assert controller.refusals() == [], "\n".join(controller.refusals()[:3])
            got = custom.get_namespaced_custom_object(
                GROUP, VERSION, release.runs, "modeldeployments", "iris"
            )
            phase = (got.get("status") or {}).get("phase")
            return got if phase not in (None, "Failed", "Pending") else None

        deployment = eventually(deploying, timeout=PATIENCE, interval=0.2)
        model = custom.get_namespaced_custom_object(GROUP, VERSION, release.runs, "models", "iris")
    finally:
        code = controller.stop()
    assert controller.refusals() == [], "\n".join(controller.refusals()[:3])
    assert code == 0, controller.text()[-3000:]
    assert model["spec"]["source"] == "s3://models/iris/model.joblib"
    assert deployment["status"]["phase"] == "Deploying", deployment["status"]
