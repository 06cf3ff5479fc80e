"""Sample objects for unit tests (plain dicts, as the API server returns them)."""

from __future__ import annotations

import copy
from typing import Any

from contracts.config import InferenceConfigSpec
from contracts.run import InferenceRunSpec
from controller.core.builders import ObjectIdentity, Resolved

NS = "team"
CONFIG_SPEC: dict[str, Any] = {
    "image": "ghcr.io/longrun/runner:1",
    "model": {"protocol": "kserve-v2", "url": "http://iris:8080", "name": "iris"},
    "storage": {"input": {"file": {"path": "/in.jsonl"}}, "output": {"file": {"path": "/out"}}},
    "backoffLimit": 2,
}


def config(name: str = "cfg", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceConfig",
        "metadata": {"name": name, "namespace": NS, "uid": "cfg-uid", "generation": 1},
        "spec": {**copy.deepcopy(CONFIG_SPEC), **spec},
    }


def run(name: str = "run", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "longrun.dev/v1alpha1",
        "kind": "InferenceRun",
        "metadata": {"name": name, "namespace": NS, "uid": f"{name}-uid", "generation": 1},
        "spec": {"configRef": {"name": "cfg"}, **spec},
    }


def resolved(run_spec: dict[str, Any] | None = None, **config_spec: Any) -> Resolved:
    return Resolved(
        run=ObjectIdentity("run", NS, "run-uid", 1),
        spec=InferenceRunSpec.model_validate({"configRef": {"name": "cfg"}, **(run_spec or {})}),
        config=ObjectIdentity("cfg", NS, "cfg-uid", 1),
        config_spec=InferenceConfigSpec.model_validate(
            {**copy.deepcopy(CONFIG_SPEC), **config_spec}
        ),
    )


def finished(kind: str, *, reason: str = "", message: str = "") -> dict[str, Any]:
    cond = {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:01:00Z",
    }
    return {"startTime": "2026-01-01T00:00:00Z", "conditions": [cond]}


def pod(
    job: str, *, exit_code: int, message: str, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-{exit_code}-{created[-3:-1]}",
            "namespace": NS,
            "labels": {"batch.kubernetes.io/job-name": job},
            "annotations": {"longrun.dev/run": "run"},
            "creationTimestamp": created,
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "runner",
                    "state": {"terminated": {"exitCode": exit_code, "message": message}},
                }
            ]
        },
    }
