"""The emulator's Job controller running pods through the local executor (e2e/local_executor.py).

Real: the API emulator and its Job controller, the controller's builders (ConfigMap + Job),
the real runner (`python -m runners`) as a subprocess, file storage. Faked: the model, a
KServe v1 stub on 127.0.0.1.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core.builders import ObjectIdentity, Resolved, build_config_map, build_job
from controller.core.settings import Settings
from e2e.emulator import Emulator, EmulatorConfig
from e2e.local_executor import LocalPodExecutor
from local.podspec import ImageMap
from tests.local.conftest import ModelStub


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    holder: dict[str, Emulator] = {}
    images = ImageMap(Settings().default_runner_image)

    def factory(_timers: object) -> LocalPodExecutor:
        return LocalPodExecutor(
            store=lambda: holder["emu"].store, workdir=tmp_path / "pods", images=images
        )

    emu = Emulator(EmulatorConfig(job_backoff_seconds=0.0), executor=factory)
    holder["emu"] = emu
    emu.start()
    yield emu
    emu.stop()


def resolved(tmp_path: Path, url: str) -> Resolved:
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": i, "x": [1.0, 2.0]}) + "\n" for i in range(30))
    )
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
        ObjectIdentity("emu-run", "default", "uid-emu-1", 1),
        run,
        ObjectIdentity("cfg", "default", "", 1),
        config,
    )


def create(emu: Emulator, resource: tuple[str, str, str], obj: dict) -> None:
    rt = emu.registry.get(*resource)
    assert rt is not None
    # No InferenceRun exists here: without this, the garbage collector would (rightly)
    # delete objects whose owner uid does not resolve.
    obj["metadata"].pop("ownerReferences", None)
    emu.api.create(rt, "default", obj)


def test_job_in_the_emulator_runs_the_real_runner_to_completion(
    tmp_path: Path, emulator: Emulator, model_stub: ModelStub
) -> None:
    res = resolved(tmp_path, model_stub.url)
    create(emulator, ("", "v1", "configmaps"), build_config_map(res))
    create(emulator, ("batch", "v1", "jobs"), build_job(res, Settings()))
    deadline = time.monotonic() + 60
    pod = None
    while time.monotonic() < deadline:
        pods, _ = emulator.store.snapshot("pods", "default")
        pod = pods[0] if pods else None
        if pod and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.05)
    assert pod is not None
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Succeeded", emulator.kubelet.logs(
        "default", pod["metadata"]["name"]
    )
    assert terminated["exitCode"] == 0
    summary = json.loads(terminated["message"])
    assert summary["recordsWritten"] == 30
    assert model_stub.instances == 30
    job = emulator.store.get("jobs.batch", "default", "emu-run")
    assert job is not None
