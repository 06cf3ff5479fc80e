"""Pods run by the node agent: what reaches `pods/status`, and what the process is given.

Real: both backends (emulator without its built-in kubelet; kube-apiserver with its
status validation and admission), the agent, `python -c ...` processes reading their
env and volumes from ConfigMaps and Secrets created through the API. Faked: nothing;
a PersistentVolumeClaim is a host directory under the agent's `pvc_root` by design.
"""

from __future__ import annotations

import base64
import json

from e2e.fixtures import eventually
from tests.nodeagent.conftest import Cluster, phase, pod_condition, terminated

WRITE_MESSAGE = (
    "import os, sys\n"
    "open(os.environ['TERMINATION_MESSAGE_PATH'], 'w').write('{\"rows\": 7}')\n"
    "sys.exit(4)"
)


def test_running_pod_reports_its_container_and_conditions(cluster: Cluster) -> None:
    cluster.create_pod("slow", "import time; time.sleep(3)")

    pod = cluster.wait_phase("slow", "Running")

    [status] = pod["status"]["containerStatuses"]
    assert status["state"]["running"]["startedAt"]
    assert (status["ready"], status["started"], status["restartCount"]) == (True, True, 0)
    for type_ in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
        assert pod_condition(pod, type_) == "True", type_
    assert pod["status"]["startTime"] and pod["status"]["hostIP"] == "127.0.0.1"
    assert pod["status"]["podIP"].startswith("127.") and pod["status"]["podIP"] != "127.0.0.1"

    done = cluster.wait_phase("slow", "Succeeded")
    assert pod_condition(done, "Ready") == "False" and pod_condition(done, "PodScheduled") == "True"


def test_termination_message_reaches_state_terminated(cluster: Cluster) -> None:
    cluster.create_pod("reporter", WRITE_MESSAGE)

    pod = cluster.wait_phase("reporter", "Failed")

    ended = terminated(pod)
    assert (ended["exitCode"], ended["reason"]) == (4, "Error")
    assert ended["message"] == '{"rows": 7}'


def test_fallback_to_logs_uses_the_output_of_a_failed_container(cluster: Cluster) -> None:
    script = "import sys\nfor i in range(100): print('line', i)\nsys.exit(1)"
    container = {"terminationMessagePolicy": "FallbackToLogsOnError"}
    cluster.create_pod("chatty", script, container=container)

    pod = cluster.wait_phase("chatty", "Failed")

    message = terminated(pod)["message"]
    assert message.endswith("line 99") and "line 19\n" not in message  # the last 80 lines


def test_active_deadline_stops_the_pod(cluster: Cluster) -> None:
    cluster.create_pod("late", "import time; time.sleep(60)", activeDeadlineSeconds=1)

    pod = cluster.wait_phase("late", "Failed")

    assert (pod["status"]["reason"], terminated(pod)["exitCode"]) == ("DeadlineExceeded", 143)


def test_process_gets_env_and_volumes_from_the_api(cluster: Cluster) -> None:
    cluster.core.create_namespaced_config_map(
        cluster.ns, {"metadata": {"name": "conf"}, "data": {"mode": "fast", "conf.ini": "[a]"}}
    )
    token = base64.b64encode(b"s3cret").decode()
    cluster.core.create_namespaced_secret(
        cluster.ns, {"metadata": {"name": "creds"}, "data": {"token": token}}
    )
    cluster.create_pod("reader", READER, container=READER_CONTAINER, volumes=READER_VOLUMES)

    pod = cluster.wait_phase("reader", "Succeeded", "Failed")

    assert phase(pod) == "Succeeded", terminated(pod)
    seen = json.loads(terminated(pod)["message"])
    assert seen == {
        "literal": "plain",
        "mode": "fast",
        "token": "s3cret",
        "pod": "reader",
        "node": cluster.node_name,
        "conf.ini": "[a]",
        "secret file": "s3cret",
        "scratch": True,
    }
    claim = cluster.agent.config.claims_root / cluster.ns / "data" / "out.txt"
    assert claim.read_text() == "kept"  # the claim outlives the pod


def test_missing_secret_keeps_the_pod_pending_until_it_exists(cluster: Cluster) -> None:
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "t"}}}]
    cluster.create_pod("patient", "import os; assert os.environ['TOKEN'] == 'ok'", container={
        "env": env})  # fmt: skip

    pod = cluster.wait_pod("patient", lambda p: _waiting_reason(p) == "CreateContainerConfigError")

    assert phase(pod) == "Pending"
    assert "later" in _state(pod)["waiting"]["message"]
    data = {"t": base64.b64encode(b"ok").decode()}
    cluster.core.create_namespaced_secret(cluster.ns, {"metadata": {"name": "later"}, "data": data})
    assert phase(cluster.wait_phase("patient", "Succeeded", "Failed")) == "Succeeded"


def test_a_full_node_binds_a_pod_only_once_a_slot_is_free(kube: Cluster) -> None:
    kube.start_agent(capacity={"cpu": "1", "memory": "1Gi", "pods": "1"})
    kube.create_pod("first", "import time; time.sleep(2)")
    kube.wait_phase("first", "Running")
    kube.create_pod("second", "pass")

    eventually(lambda: kube.agent.unplaced() == [f"{kube.ns}/second"])
    assert (kube.pod("second") or {})["spec"].get("nodeName") is None

    second = kube.wait_phase("second", "Succeeded", timeout=30)
    first = kube.pod("first") or {}
    assert terminated(first)["finishedAt"] <= terminated(second)["startedAt"]


def test_pods_of_other_namespaces_are_left_alone(cluster: Cluster) -> None:
    other = cluster.handle.namespace("elsewhere")
    cluster.core.create_namespaced_pod(other, cluster.python_pod("stranger", "pass"))
    cluster.create_pod("mine", "pass")

    cluster.wait_phase("mine", "Succeeded")

    stranger = cluster.core.read_namespaced_pod("stranger", other)
    assert stranger.spec.node_name is None and stranger.status.phase == "Pending"
    assert not any(key.startswith(f"{other}/") for key in cluster.agent.seen)


# The reader pod: every kind of env and volume the agent maps, echoed back as JSON through
# the termination message. Env values naming a ConfigMap/Secret mount are moved under the
# pod's root (local/podspec); the claim and emptyDir are found from that root.
READER = """
import json, os, pathlib
env = os.environ
root = pathlib.Path(env['CONF_DIR']).parents[1]  # the pod's directory: /etc/conf in it
pathlib.Path(root, 'data', 'out.txt').write_text('kept')
seen = {
    'literal': env['LITERAL'], 'mode': env['MODE'], 'token': env['TOKEN'],
    'pod': env['POD_NAME'], 'node': env['NODE_NAME'],
    'conf.ini': pathlib.Path(env['CONF_DIR'], 'conf.ini').read_text(),
    'secret file': pathlib.Path(env['SECRET_DIR'], 'token').read_text(),
    'scratch': pathlib.Path(root, 'scratch').is_dir(),
}
open(env['TERMINATION_MESSAGE_PATH'], 'w').write(json.dumps(seen))
"""
READER_CONTAINER = {
    "env": [
        {"name": "LITERAL", "value": "plain"},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "conf", "key": "mode"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "CONF_DIR", "value": "/etc/conf"},
        {"name": "SECRET_DIR", "value": "/var/run/creds"},
    ],
    "volumeMounts": [
        {"name": "conf", "mountPath": "/etc/conf"},
        {"name": "creds", "mountPath": "/var/run/creds"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "data", "mountPath": "/data"},
    ],
}
READER_VOLUMES = [
    {"name": "conf", "configMap": {"name": "conf"}},
    {"name": "creds", "secret": {"secretName": "creds"}},
    {"name": "scratch", "emptyDir": {}},
    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
]


def _state(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state") or {})


def _waiting_reason(pod: dict) -> str:
    return str((_state(pod).get("waiting") or {}).get("reason", ""))
