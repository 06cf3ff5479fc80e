"""The node agent riding out what goes wrong between it and the API server.

Real: the API emulator's HTTP server, watch streams and fault injection (410 Gone on a
watch, cut connections, 500s and a 409 on writes), the agent's informer relisting and
its retries. Faked: the failures themselves, injected; emulator only, since only it can
inject them.
"""

from __future__ import annotations

from typing import Any

from tests.nodeagent.conftest import Cluster, terminated


def test_the_agent_rides_out_broken_watches_and_failed_writes(emulated: Cluster) -> None:
    faults: Any = emulated.handle.faults  # type: ignore[attr-defined]
    rules = [
        faults.fail_next("watch", "pods", status=410),  # the informer must list again
        faults.fail_next("create", "pods/binding", status=500),
        faults.fail_next("update", "pods/status", status=500, count=2),
        faults.fail_next("update", "pods/status", status=409),
    ]
    faults.drop_watches()

    emulated.create_pod("sturdy", "print('ok')")

    pod = emulated.wait_phase("sturdy", "Succeeded", "Failed")
    assert terminated(pod)["exitCode"] == 0
    assert [rule.remaining for rule in rules] == [0, 0, 0, 0]  # every failure was met
