"""Pods of several containers on the node agent: init containers in order and to completion,
containers that share the pod's volumes and address, and the probes that make them ready.

Real: the node agent running each container as a local `python -c ...` process, its
HTTP and TCP probes against the pod's own loopback address, and either backend (the API
emulator with its kubelet off, or kube-apiserver + kube-controller-manager when found).
Faked: nothing; probe periods are 1 s so readiness shows within seconds. The last test
calls the pod-tree builder directly, with ConfigMaps and Secrets from a dict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.nodeagent.containers import write_pod_volumes
from local.podspec import MappingSource, PodSetupError
from tests.nodeagent.conftest import Cluster, phase, pod_condition

Obj = dict[str, Any]
PY = "python:3.11-slim"
SHARED = [{"name": "shared", "emptyDir": {}}]
MOUNT = [{"name": "shared", "mountPath": "/work"}]
POD_IP_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
# Serves GET /ok (200) and anything else 500, on the pod's address, after `DELAY` seconds.
SERVER = """
import http.server, os, time
time.sleep(float(os.environ.get('DELAY', '0')))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == '/ok' else 500); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer((os.environ['POD_IP'], 8080), H).serve_forever()
"""


def container(name: str, script: str, **extra: Any) -> Obj:
    return {"name": name, "image": PY, "command": ["python", "-c", script], **extra}


def create(cluster: Cluster, name: str, **spec: Any) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {"schedulerName": cluster.node_name, "restartPolicy": "Never", **spec},
    }
    cluster.core.create_namespaced_pod(cluster.ns, body, _preload_content=False)


def statuses(pod: Obj, key: str = "containerStatuses") -> dict[str, Obj]:
    return {s["name"]: s for s in (pod.get("status") or {}).get(key) or []}


def probe(path: str | None = None, **timing: Any) -> Obj:
    check = {"httpGet": {"path": path, "port": 8080}} if path else {"tcpSocket": {"port": 8080}}
    return {**check, "periodSeconds": 1, "failureThreshold": 3, **timing}


def test_init_containers_run_in_order_to_completion_and_share_volumes(cluster: Cluster) -> None:
    # `W` is the mount path as the container knows it; the agent moves it into the pod's tree.
    env = [{"name": "W", "value": "/work"}]
    step = "import os; open(os.environ['W'] + '/steps', 'a').write('{}')"
    first = container("first", step.format("first "), volumeMounts=MOUNT, env=env)
    second = container("second", step.format("second"), volumeMounts=MOUNT, env=env)
    report = "import os; open(os.environ['TERMINATION_MESSAGE_PATH'], 'w').write("
    report += "open(os.environ['W'] + '/steps').read())"
    main = container("main", report, volumeMounts=MOUNT, env=env)
    create(cluster, "ordered", initContainers=[first, second], containers=[main], volumes=SHARED)

    pod = cluster.wait_phase("ordered", "Succeeded", "Failed")

    assert phase(pod) == "Succeeded", pod["status"]
    assert statuses(pod)["main"]["state"]["terminated"]["message"] == "first second"
    inits = statuses(pod, "initContainerStatuses")
    assert [inits[n]["state"]["terminated"]["reason"] for n in ("first", "second")] == [
        "Completed",
        "Completed",
    ]
    assert pod_condition(pod, "Initialized") == "True"


def test_a_failed_init_container_fails_a_never_restarting_pod(cluster: Cluster) -> None:
    init = container("fetch", "import sys; print('no model'); sys.exit(4)")
    create(cluster, "broken", initContainers=[init], containers=[container("main", "pass")])

    pod = cluster.wait_phase("broken", "Failed")

    ended = statuses(pod, "initContainerStatuses")["fetch"]["state"]["terminated"]
    assert (ended["exitCode"], ended["reason"]) == (4, "Error")  # kubectl: Init:Error
    assert statuses(pod)["main"]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert pod_condition(pod, "Initialized") == "False"


def test_a_failed_init_container_is_retried_with_back_off_until_it_succeeds(
    cluster: Cluster,
) -> None:
    # Fails on its first run only: the emptyDir remembers the attempt across restarts.
    flaky = "import os, sys; p = os.environ['W'] + '/tried'; done = os.path.exists(p); "
    flaky += "open(p, 'w').close(); sys.exit(0 if done else 1)"
    init = container("fetch", flaky, volumeMounts=MOUNT, env=[{"name": "W", "value": "/work"}])
    create(
        cluster,
        "retried",
        restartPolicy="Always",
        initContainers=[init],
        containers=[container("main", "import time; time.sleep(60)")],
        volumes=SHARED,
    )

    pod = cluster.wait_pod("retried", lambda p: pod_condition(p, "Ready") == "True")

    fetch = statuses(pod, "initContainerStatuses")["fetch"]
    assert fetch["restartCount"] == 1 and fetch["lastState"]["terminated"]["exitCode"] == 1
    assert fetch["state"]["terminated"]["exitCode"] == 0 and phase(pod) == "Running"


def test_readiness_probe_makes_the_container_ready_once_it_answers(cluster: Cluster) -> None:
    server = container(
        "server",
        SERVER,
        env=[*POD_IP_ENV, {"name": "DELAY", "value": "2"}],
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe=probe("/ok"),
    )
    create(cluster, "probed", containers=[server])

    running = cluster.wait_phase("probed", "Running")
    ready = cluster.wait_pod("probed", lambda p: pod_condition(p, "Ready") == "True")

    assert pod_condition(running, "Ready") == "False"  # running, not answering yet
    assert statuses(ready)["server"]["ready"] is True
    assert pod_condition(ready, "ContainersReady") == "True"
    assert ready["status"]["podIP"] != "127.0.0.1"


def test_a_failing_readiness_probe_keeps_one_container_of_two_unready(cluster: Cluster) -> None:
    server = container("server", SERVER, env=POD_IP_ENV, readinessProbe=probe("/broken"))
    helper = container("helper", "import time; time.sleep(60)")
    create(cluster, "half", containers=[server, helper])

    pod = cluster.wait_pod(
        "half",
        lambda p: statuses(p).get("helper", {}).get("ready") is True and phase(p) == "Running",
    )

    assert statuses(pod)["server"]["ready"] is False
    assert pod_condition(pod, "Ready") == "False"
    assert pod_condition(pod, "ContainersReady") == "False"


def test_containers_of_a_pod_reach_each_other_on_its_address(cluster: Cluster) -> None:
    server = container("server", SERVER, env=POD_IP_ENV, startupProbe=probe())
    client = (
        "import os, time, urllib.request\n"
        "for _ in range(100):\n"
        "    try:\n"
        "        code = urllib.request.urlopen(f'http://{os.environ[\"POD_IP\"]}:8080/ok').status\n"
        "        break\n"
        "    except OSError: time.sleep(0.2)\n"
        "open(os.environ['TERMINATION_MESSAGE_PATH'], 'w').write(str(code))"
    )
    create(cluster, "pair", containers=[server, container("client", client, env=POD_IP_ENV)])

    pod = cluster.wait_pod(
        "pair",
        lambda p: (
            "terminated" in statuses(p)["client"]["state"] and statuses(p)["server"]["started"]
        ),
    )

    assert statuses(pod)["client"]["state"]["terminated"]["message"] == "200"


def test_a_container_that_ends_is_reported_while_the_other_runs_on(cluster: Cluster) -> None:
    slow = container("slow", "import time; time.sleep(60)")
    create(cluster, "uneven", containers=[container("quick", "print('done')"), slow])

    pod = cluster.wait_pod(
        "uneven", lambda p: "terminated" in statuses(p).get("quick", {}).get("state", {})
    )

    assert statuses(pod)["quick"]["state"]["terminated"]["reason"] == "Completed"
    assert "running" in statuses(pod)["slow"]["state"] and phase(pod) == "Running"


def test_a_startup_probe_that_never_passes_restarts_the_container(cluster: Cluster) -> None:
    silent = container(
        "silent",
        "import time; time.sleep(60)",
        startupProbe=probe(failureThreshold=2),
        ports=[{"containerPort": 8080}],
    )
    create(cluster, "unstarted", restartPolicy="Always", containers=[silent])

    pod = cluster.wait_pod(
        "unstarted", lambda p: statuses(p).get("silent", {}).get("restartCount", 0) >= 1
    )

    status = statuses(pod)["silent"]
    assert status["started"] is False or "waiting" in status["state"], json.dumps(status)
    assert "terminated" in status["lastState"]


def test_one_volume_at_two_paths_is_one_directory_and_two_volumes_at_one_path_are_refused(
    tmp_path: Path,
) -> None:
    volumes = [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]
    meta = {"name": "p", "namespace": "ns"}
    shared = {
        "metadata": meta,
        "spec": {
            "volumes": volumes,
            "initContainers": [{"name": "i", "volumeMounts": [{"name": "a", "mountPath": "/in"}]}],
            "containers": [{"name": "c", "volumeMounts": [{"name": "a", "mountPath": "/out"}]}],
        },
    }
    write_pod_volumes(shared, source=MappingSource(), root=tmp_path / "p", claims_root=tmp_path)
    (tmp_path / "p" / "in" / "model").write_text("m")
    assert (tmp_path / "p" / "out" / "model").read_text() == "m"

    clash = {
        "metadata": meta,
        "spec": {
            "volumes": volumes,
            "containers": [
                {"name": "c", "volumeMounts": [{"name": "a", "mountPath": "/data"}]},
                {"name": "d", "volumeMounts": [{"name": "b", "mountPath": "/data"}]},
            ],
        },
    }
    with pytest.raises(PodSetupError, match="mount path /data is volume 'a' in one container"):
        write_pod_volumes(clash, source=MappingSource(), root=tmp_path / "q", claims_root=tmp_path)
