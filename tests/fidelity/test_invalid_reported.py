"""Every invalid example is refused by the API server or reported by the controller.

Real: both backends with longrun's CRDs, the official Python client, the real controller
(`controller.runtime.manager.Manager`, in-process, watching the test's namespace), every
file of testdata/invalid/. Faked: nothing. Each file's documents are created one by one,
over the wire, as `kubectl create` sends them. For each document the test records the
server's answer (the refusal's code and message, or "accepted" with the server's
warnings) and, when accepted, the condition the controller set on it within 30 s. None
may be accepted and then go unreported: an accepted document must end with a condition
that says what is wrong (status False, with a reason and a message).
What was observed is compared with golden/invalid_reported.json; after a CRD, testdata or
controller change, re-record it with LONGRUN_FIDELITY_RECORD=1 on the real backend.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.core.settings import Settings
from controller.runtime.manager import Manager
from tests.fidelity.conftest import Cluster, wait_for
from tests.fidelity.divergences import as_real_server_says

ROOT = Path(__file__).resolve().parents[2]
INVALID = ROOT / "testdata" / "invalid"
GOLDEN = Path(__file__).parent / "golden" / "invalid_reported.json"
RECORD = "LONGRUN_FIDELITY_RECORD"
PATIENCE = 30.0  # the bound: reported within 30 s
Obj = dict[str, Any]


@pytest.fixture
def controller(kube: Cluster) -> Iterator[Manager]:
    """The real controller, watching this test's namespace only."""
    settings = Settings(
        max_reconcile_rate=2,
        leader_election=False,
        watch_namespaces=(kube.ns,),
        polling_interval=30.0,
    )
    manager = Manager(kube.handle.api_client(), settings, identity=f"invalid-{kube.backend}")
    manager.start()
    try:
        yield manager
    finally:
        manager.stop()


def _path(doc: Obj, namespace: str, name: str = "") -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    plural = doc["kind"].lower() + "s"
    base = f"/apis/{group}/{version}/namespaces/{namespace}/{plural}"
    return f"{base}/{name}" if name else base


def _accept_or_refuse(kube: Cluster, doc: Obj) -> tuple[Obj, Obj | None]:
    """(what the server answered, the created object or None)."""
    answer = kube.raw("POST", _path(doc, kube.ns), doc)
    if answer.status >= 400:
        message = answer.body.get("message", answer.body.get("text", ""))
        worded = as_real_server_says(message, backend=kube.backend, code=answer.status)
        return {"refused": [answer.status, worded]}, None
    warnings = [w for k, w in answer.headers.items() if k.lower() == "warning"]
    return {"accepted": {"warnings": sorted(_warning_texts(warnings))}}, answer.body


def _warning_texts(headers: list[str]) -> list[str]:
    # `299 - "unknown field \"spec.timeout\""`: the quoted texts, unescaped.
    return [
        re.sub(r"\\(.)", r"\1", text)
        for header in headers
        for text in re.findall(r'299 - "((?:[^"\\]|\\.)*)"', header)
    ]


def _reported(kube: Cluster, doc: Obj, name: str) -> Obj | None:
    """The condition that tells the user what to fix: `Accepted` False where the kind has
    it, else any False condition with a reason and a message (a ModelDeployment reports
    its spec on `Progressing`)."""
    obj = kube.raw("GET", _path(doc, kube.ns, name)).body
    conditions = (obj.get("status") or {}).get("conditions") or []
    telling = [
        c for c in conditions if c.get("status") == "False" and c.get("reason") and c.get("message")
    ]
    telling.sort(key=lambda c: c.get("type") != "Accepted")
    if not telling:
        return None
    found = {k: telling[0][k] for k in ("type", "status", "reason", "message")}
    found["message"] = found["message"].replace(kube.ns, "<namespace>")  # a fresh one per run
    return found


def _delete(kube: Cluster, doc: Obj, name: str) -> None:
    kube.raw("DELETE", _path(doc, kube.ns, name))
    wait_for(lambda: kube.raw("GET", _path(doc, kube.ns, name)).status == 404, what=f"{name} gone")


def test_every_invalid_file_is_refused_or_reported_within_30_seconds(
    kube: Cluster, controller: Manager
) -> None:
    observed: dict[str, list[Obj]] = {}
    for path in sorted(INVALID.glob("*.yaml")):  # one after the other: names repeat
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        answers: list[Obj] = []
        created: list[tuple[Obj, str]] = []
        for doc in docs:
            answer, obj = _accept_or_refuse(kube, doc)
            if obj is not None:
                created.append((doc, obj["metadata"]["name"]))
            answers.append(answer)
        for (doc, name), answer in zip(
            created, [a for a in answers if "accepted" in a], strict=True
        ):
            condition = wait_for(
                lambda doc=doc, name=name: _reported(kube, doc, name),
                timeout=PATIENCE,
                what=f"{path.name}: a condition on {doc['kind']} {name}",
            )
            answer["accepted"]["condition"] = condition
        for doc, name in created:
            _delete(kube, doc, name)
        observed[path.name] = answers
    if kube.is_real and os.environ.get(RECORD):
        GOLDEN.write_text(json.dumps(observed, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    differing = {
        name: {"expected": expected.get(name), "observed": got}
        for name, got in observed.items()
        if expected.get(name) != got
    }
    assert not differing, (
        json.dumps(differing, indent=1) + f"\nIf the CRDs, testdata or controller changed, "
        f"re-record on the real backend: {RECORD}=1 pytest {Path(__file__).name} -k real"
    )
    assert set(expected) == set(observed), "golden file lists files that no longer exist"
