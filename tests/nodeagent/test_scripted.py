"""Scripted containers: pods whose outcome a test decides, run by the node agent, on both backends.

Real: both backends, the node agent binding each pod and running the scripted program
(e2e/nodeagent/scripted_program.py) as a local process with the pod's env and termination
message file, SIGTERM on deletion, the status the agent writes, and the Job controller
reading it. Faked: what the process does, which is the point: the test scripts it. (Its
output, read through `pods/log`, is checked by tests/controller/emulated/test_run_control.)
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.nodeagent import ScriptedPods
from tests.nodeagent.conftest import Cluster, pod_condition, terminated

Obj = dict[str, Any]


def _pod(cluster: Cluster, name: str, **container: Any) -> Obj:
    """A pod of the test's own scheduler whose image nothing on this machine could run."""
    spec = {"name": "main", "image": "registry.invalid/anything:1", **container}
    body = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "schedulerName": cluster.node_name,
            "containers": [spec],
        },
    }
    return cluster.core.create_namespaced_pod(  # type: ignore[no-any-return]
        cluster.ns, body, _preload_content=False
    )


def _scripted_agent(cluster: Cluster) -> ScriptedPods:
    pods = ScriptedPods()
    cluster.start_agent(scripted=pods)
    return pods


def test_a_scripted_pod_ends_with_its_exit_code_and_message(kube: Cluster) -> None:
    pods = _scripted_agent(kube)
    pods.script(pod_prefix="done", exit_code=4, message='{"reason": "model down"}')

    _pod(kube, "done-1", readinessProbe={"httpGet": {"path": "/", "port": 8080}})

    pod = kube.wait_phase("done-1", "Failed")
    ended = terminated(pod)
    assert (ended["exitCode"], ended["message"]) == (4, '{"reason": "model down"}')
    assert pods.started == ["done-1"]


def test_an_unscripted_pod_succeeds_at_once_and_rules_count_down(kube: Cluster) -> None:
    pods = _scripted_agent(kube)
    pods.script(pod_prefix="p", exit_code=1, times=1)

    _pod(kube, "p-1")
    kube.wait_phase("p-1", "Failed")
    _pod(kube, "p-2")  # the rule was used up: unmatched pods succeed

    assert terminated(kube.wait_phase("p-2", "Succeeded"))["exitCode"] == 0


def test_a_held_pod_is_ready_without_probes_and_ends_when_finished(kube: Cluster) -> None:
    pods = _scripted_agent(kube)
    pods.script(hold=True)

    _pod(kube, "held", readinessProbe={"httpGet": {"path": "/", "port": 8080}})
    kube.wait_pod("held", lambda p: pod_condition(p, "Ready") == "True")
    pods.finish("held", exit_code=0, message="finished by the test")

    pod = kube.wait_phase("held", "Succeeded")
    assert terminated(pod)["message"] == "finished by the test"


def test_deleting_a_held_pod_stops_its_process_and_says_so(kube: Cluster) -> None:
    pods = _scripted_agent(kube)
    pods.script(hold=True)
    _pod(kube, "doomed")
    kube.wait_phase("doomed", "Running")

    kube.core.delete_namespaced_pod("doomed", kube.ns)

    kube.wait_gone("doomed")
    assert pods.killed == ["doomed"]


def test_a_disrupted_pod_gets_the_disruption_condition_and_dies(kube: Cluster) -> None:
    pods = _scripted_agent(kube)
    pods.script(hold=True)
    _pod(kube, "evicted")
    kube.wait_phase("evicted", "Running")

    pods.disrupt("evicted")

    pod = kube.wait_phase("evicted", "Failed")
    assert terminated(pod)["exitCode"] == 137
    assert pod_condition(pod, "DisruptionTarget") == "True"


def test_finishing_a_pod_that_never_started_says_which(kube: Cluster) -> None:
    pods = _scripted_agent(kube)

    with pytest.raises(KeyError, match=r"no scripted pod 'nobody' started within 0\.2s"):
        pods.finish("nobody", timeout=0.2)
