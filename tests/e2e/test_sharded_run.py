"""One run over three pods: an Indexed Job whose pods share the input, one of them killed.

Real: the backend's Job controller (the emulator's, or kube-controller-manager's with
LONGRUN_KUBE_BACKEND=real) running the Indexed Job, replacing a failed pod for its index only
(backoffLimitPerIndex), the node agent running the real runner as each pod's process with its
JOB_COMPLETION_INDEX, `longrun controller` as a process, kubectl, KServe's model server, local
files. Injected: a SIGKILL of one runner process (as an OOM kill would do).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from e2e.fixtures import eventually
from e2e.peers.server import PeerServer
from e2e.system import System, runner_pids
from tests.e2e.conftest import apply
from tests.e2e.test_examples import wait_phase
from tests.e2e.test_lifecycle import file_run, output_ids, run_uid

INDEX = "batch.kubernetes.io/job-completion-index"


def test_a_run_over_three_pods_with_one_killed_writes_every_record_exactly_once(
    system: System, kserve_server: PeerServer, tmp_path: Path
) -> None:
    records = 6000  # 60 chunks of 100, 20 per pod: the kill lands long before the end
    ns = system.namespace("sharded")
    config, run = file_run(model=kserve_server, data=tmp_path, records=records, name="wide")
    run["spec"]["parallelism"] = 3
    apply(system, ns, [config, run])
    uid = run_uid(system, ns, "wide")
    out = tmp_path / "out"
    eventually(lambda: len(list(out.glob("part-*.jsonl"))) >= 6, timeout=90)
    pids = eventually(lambda: (p := runner_pids(uid)) and len(p) == 3 and p, timeout=30)

    os.kill(pids[0], signal.SIGKILL)
    status = wait_phase(system, ns, "wide", "Succeeded")

    ids = output_ids(out)
    assert len(ids) == records and sorted(ids) == list(range(records))
    manifest = json.loads((out / "_SUCCESS").read_text())
    assert (manifest["recordsWritten"], manifest["chunks"]) == (records, 60)
    assert status["result"]["recordsWritten"] == records  # the indexes' summaries added up
    assert status["result"]["chunks"] == 60
    job = system.get("job", status["jobName"], ns)
    assert job is not None
    spec, done = job["spec"], job["status"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert (done.get("failed"), done.get("succeeded"), done.get("completedIndexes")) == (
        1,
        3,
        "0-2",
    )
    pods = system.items("pods", ns, f"job-name={status['jobName']}")
    indexes = sorted(p["metadata"]["annotations"][INDEX] for p in pods)
    assert len(pods) == 4 and len(set(indexes)) == 3  # the killed pod's index ran twice
