"""The window in which old API keys still work after a rotation, on a real control plane. The
node has room for one pod, as a GPU node sized for `replicas` has: the rollout's new pod cannot
be placed while the old one, which read the old keys at start, still serves them. Once the
rollout is stuck (ProgressDeadlineExceeded) the controller switches the Deployment to Recreate,
kube-controller-manager's Deployment controller stops the old pod, the new one takes its place,
the status and an event say OldKeysRevoked, and the Deployment returns to its own strategy.

Real: etcd, kube-apiserver and kube-controller-manager (its Deployment and ReplicaSet
controllers: the emulator has none, so this runs on the real backend only, whatever
LONGRUN_KUBE_BACKEND says, and skips with `real control plane:` without its binaries), the
official client, the whole controller, a node agent taking at most one pod. Faked: what the
pods' containers do (scripted: held Running, ready); the controller's download deadline is 0,
so the rollout deadline is the smallest startupTimeoutSeconds (30 s).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from contracts.serving import ROTATE_KEYS_ANNOTATION
from controller.core.serving import names
from controller.core.serving.settings import ServingSettings
from controller.runtime.manager import Manager
from e2e.fixtures import eventually, start_scripted_agent
from e2e.nodeagent import Kube, ScriptedPods
from e2e.nodeagent.logs import KubeletTLS
from e2e.real.handle import RealClusterHandle
from tests.controller.emulated.harness import Env
from tests.controller.emulated.serving import SKLEARN, Serving, plain

pytestmark = pytest.mark.slow
Obj = dict[str, Any]
LONG = 180.0  # the 30 s deadline, the Deployment controller's requeue, a loaded machine


@pytest.fixture
def full_node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    """A namespace of the real control plane whose one node takes a single pod."""
    handle: RealClusterHandle = request.getfixturevalue("kube_real_session")
    handle.require_controllers()
    api, namespace = handle.api_client(), handle.namespace("keys")
    node, pods = f"node-{namespace}", ScriptedPods()
    pair = handle.plane.issue_kubelet_certificate(node, hostname=socket.gethostname())
    agent = start_scripted_agent(
        Kube(handle.api_client()),
        pods,
        tmp_path / "node",
        namespaces=(namespace,),
        node_name=node,
        kubelet_tls=KubeletTLS(pair.cert, pair.key, handle.plane.ca_cert_path),
        pods_capacity=1,
    )
    core = client.CoreV1Api(api)
    env = Env(
        handle,
        pods,
        namespace,
        client.CustomObjectsApi(api),
        core,
        client.BatchV1Api(api),
        lambda: datetime.now(UTC),
        agent.stop,
    )
    try:
        yield env
    finally:
        env.close()
        core.delete_node(node)


def start(env: Env) -> None:
    manager = Manager(
        env.kube.api_client(),
        env.settings(),
        now=env.now,
        identity="test-keys",
        serving_settings=ServingSettings(download_deadline_seconds=0),
    )
    env.managers.append(manager)
    manager.start()


def pods(env: Env) -> list[Obj]:
    found = env.core.list_namespaced_pod(env.ns, label_selector=f"{names.DEPLOYMENT_LABEL}=iris")
    return [plain(p) for p in found.items]


def keys_versions(env: Env) -> set[str]:
    """The keys versions of the deployment's pods that are not being stopped."""
    return {
        p["metadata"]["annotations"][names.KEYS_VERSION_ANNOTATION]
        for p in pods(env)
        if not p["metadata"].get("deletionTimestamp")
    }


def strategy(env: Env) -> Obj:
    apps = client.AppsV1Api(env.kube.api_client())
    return dict(plain(apps.read_namespaced_deployment("iris", env.ns))["spec"]["strategy"])


def test_a_stuck_rollout_after_a_rotation_stops_the_pod_with_the_old_keys(full_node: Env) -> None:
    env, serving = full_node, Serving(full_node)
    env.scripted.script(hold=True)
    start(env)
    serving.create(model=SKLEARN, replicas=1, startupTimeoutSeconds=30)
    old = serving.wait_phase("Running", timeout=LONG)["apiKeys"]["version"]
    assert keys_versions(env) == {old}

    rotate = {"metadata": {"annotations": {ROTATE_KEYS_ANNOTATION: "after-a-leak"}}}
    serving.patch("iris", rotate)
    new = eventually(
        lambda: (v := serving.status()["apiKeys"]["version"]) != old and v, timeout=LONG
    )

    # The window: the new pod waits for room, the old one still serves the old keys.
    eventually(lambda: len(pods(env)) == 2, timeout=LONG)
    assert keys_versions(env) == {old, new}
    # Stuck: the controller ends the window.
    eventually(
        lambda: any(
            e["reason"] == "OldKeysRevoked" for e in env.events() if e["type"] == "Warning"
        ),
        timeout=LONG,
        interval=1.0,
    )
    eventually(lambda: keys_versions(env) == {new}, timeout=LONG, interval=1.0)
    # Room again: the new pod serves, and the Deployment has its own strategy back.
    serving.wait_phase("Running", timeout=LONG)
    eventually(lambda: strategy(env)["type"] == "RollingUpdate", timeout=LONG)
    assert strategy(env)["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    env.settle()
    assert keys_versions(env) == {new}  # nothing brought the old pod back
