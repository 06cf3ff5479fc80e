"""longrun's own runner pod, as the controller renders it, run by the node agent.

Real: the controller's builders (contract ConfigMap and Job, restricted securityContext
and all), both backends' Job controllers, the runner image mapped to `python -m runners`
by the agent, the contract's `secretsDir` localized, file storage in the test's
directory, the runner's summary read back from the termination message. Faked: the
model, a KServe v1 stub on 127.0.0.1 (tests/local/conftest.py's ModelStub).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core.builders import ObjectIdentity, Resolved, build_config_map, build_job
from controller.core.settings import Settings
from tests.local.conftest import ModelStub
from tests.nodeagent.conftest import Cluster, phase, terminated

RECORDS = 12


@pytest.fixture
def stub() -> Iterator[ModelStub]:
    model = ModelStub()
    yield model
    model.close()


def test_the_runner_job_completes_with_its_summary(
    cluster: Cluster, stub: ModelStub, tmp_path: Path
) -> None:
    res = _resolved(cluster.ns, tmp_path, stub.url)
    config_map, job = (
        _without_owner(build_config_map(res)),
        _without_owner(build_job(res, Settings())),
    )
    job["spec"]["template"]["spec"]["schedulerName"] = cluster.node_name
    cluster.core.create_namespaced_config_map(cluster.ns, config_map)
    cluster.batch.create_namespaced_job(cluster.ns, job)

    cluster.wait_job(job["metadata"]["name"], "Complete", timeout=90)

    [pod] = cluster.job_pods(job["metadata"]["name"])
    assert phase(pod) == "Succeeded"
    assert json.loads(terminated(pod)["message"])["recordsWritten"] == RECORDS
    assert stub.instances == RECORDS


def _resolved(namespace: str, tmp_path: Path, url: str) -> Resolved:
    rows = "".join(json.dumps({"id": i, "x": [1.0, 2.0]}) + "\n" for i in range(RECORDS))
    (tmp_path / "in.jsonl").write_text(rows)
    config = InferenceConfigSpec.model_validate(
        {
            "model": {"protocol": "kserve-v1", "url": url, "name": "iris", "inputFields": ["x"]},
            "storage": {
                "input": {"file": {"path": str(tmp_path / "in.jsonl"), "idField": "id"}},
                "output": {"file": {"path": str(tmp_path / "out")}},
            },
        }
    )
    run = InferenceRunSpec.model_validate({"configRef": {"name": "cfg"}})
    return Resolved(
        ObjectIdentity("agent-run", namespace, "uid-agent-1", 1),
        run,
        ObjectIdentity("cfg", namespace, "", 1),
        config,
    )


def _without_owner(obj: dict[str, Any]) -> dict[str, Any]:
    # No InferenceRun exists here: the garbage collector would (rightly) delete objects
    # whose owner's uid does not resolve.
    obj["metadata"].pop("ownerReferences", None)
    return obj
