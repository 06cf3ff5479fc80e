"""Deleting pods the node agent runs, and stopping the agent itself.

Real: both backends' graceful pod deletion (a deletionTimestamp, then the kubelet's
delete with grace 0, without which kube-apiserver keeps a bound pod forever), the
garbage collector deleting a Job's pods, the agent's processes and the signals they
receive (checked through files they write and their pids). Faked: nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from e2e.fixtures import eventually
from tests.nodeagent.conftest import Cluster, phase, terminated

# Writes `TERM` to $MARK on SIGTERM and exits 0; otherwise runs for a minute.
TRAP_TERM = """
import os, signal, sys, time
def stop(*_):
    open(os.environ['MARK'], 'w').write('TERM')
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(os.environ['READY'], 'w').write('ready')
time.sleep(60)
"""
# Ignores SIGTERM, and says so in $READY once the handler is installed.
IGNORE_TERM = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.environ['READY'], 'w').write('ready')
time.sleep(60)
"""


def test_deleting_a_running_pod_sends_sigterm_and_the_pod_disappears(
    cluster: Cluster, tmp_path: Path
) -> None:
    mark, ready = tmp_path / "mark", tmp_path / "ready"
    env = [{"name": "MARK", "value": str(mark)}, {"name": "READY", "value": str(ready)}]
    cluster.create_pod("victim", TRAP_TERM, container={"env": env})
    cluster.wait_phase("victim", "Running")
    eventually(ready.exists, timeout=30)  # the handler is installed

    cluster.core.delete_namespaced_pod("victim", cluster.ns)

    cluster.wait_gone("victim")
    assert mark.read_text() == "TERM"


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    cluster: Cluster, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    env = [{"name": "READY", "value": str(ready)}]
    cluster.create_pod(
        "stubborn", IGNORE_TERM, container={"env": env}, terminationGracePeriodSeconds=2
    )
    cluster.wait_phase("stubborn", "Running")
    eventually(ready.exists, timeout=30)  # SIGTERM is ignored from here on
    pid = _pid_of(cluster, "stubborn")
    started = time.monotonic()

    cluster.core.delete_namespaced_pod("stubborn", cluster.ns)

    cluster.wait_gone("stubborn")
    assert time.monotonic() - started >= 2
    assert not _alive(pid)


def test_deleting_a_job_stops_its_running_pod(cluster: Cluster) -> None:
    cluster.create_job("doomed", "import time; time.sleep(60)")
    pod = eventually(lambda: [p for p in cluster.job_pods("doomed") if phase(p) == "Running"])[0]
    pid = _pid_of(cluster, pod["metadata"]["name"])

    cluster.batch.delete_namespaced_job("doomed", cluster.ns, propagation_policy="Background")

    eventually(lambda: not cluster.job_pods("doomed"), timeout=30)
    assert not _alive(pid)


def test_stopping_the_agent_kills_its_processes_and_marks_nothing(cluster: Cluster) -> None:
    cluster.create_pod("orphan", "import time; time.sleep(60)")
    cluster.wait_phase("orphan", "Running")
    pid = _pid_of(cluster, "orphan")

    cluster.agent.stop()

    assert not _alive(pid)
    assert phase(cluster.pod("orphan") or {}) == "Running"
    node = cluster.core.read_node(cluster.node_name)
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"


def test_a_restarted_agent_reports_the_pod_it_lost(cluster: Cluster) -> None:
    cluster.create_pod("lost", "import time; time.sleep(60)")
    cluster.wait_phase("lost", "Running")
    cluster.agent.stop()

    cluster.start_agent()

    pod = cluster.wait_phase("lost", "Failed")
    ended = terminated(pod)
    assert (ended["exitCode"], ended["reason"]) == (137, "ContainerStatusUnknown")


def _pid_of(cluster: Cluster, name: str) -> int:
    worker = next(w for w in cluster.agent.workers() if w.key == f"{cluster.ns}/{name}")
    assert worker.pid is not None
    return worker.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
