"""A run authenticates to its model with its own ServiceAccount token, on both backends.

Real: a Kubernetes (the API emulator, or kube-apiserver + kube-controller-manager when
KUBEBUILDER_ASSETS or setup-envtest's folder holds them; skipped otherwise, as every real
test), `longrun controller` as a process rendering the projected token volume, the node
agent asking the API server for the pod's token (TokenRequest, bound to the pod) as a
kubelet does, the real runner sending it, kubectl applying the shipped example
(testdata/examples/serviceaccount-token) with its model URL and file paths moved to this
machine. Faked: the model, an OpenAI-compatible stand-in on 127.0.0.1 that records the
Authorization header of each request and answers every prompt the same. The token is read
without verifying its signature: its claims are what this test checks (verifying is the
model server's part: docs/serving.md, "Tokens").
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.backends import BACKENDS
from e2e.system import System
from tests.e2e.conftest import apply, example, find
from tests.e2e.test_examples import assert_counts, wait_phase
from tests.runners.http_stub import serve

Obj = dict[str, Any]
ACCOUNT = "model-caller"
AUDIENCE = "models.example"
QUESTIONS = 5


def claims(token: str) -> Obj:
    """A JWT's payload, decoded without verifying it."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


def chat_model(seen: list[str]) -> Callable[..., Any]:
    def handler(method: str, path: str, query: Any, body: Any, headers: dict[str, str]) -> Any:
        seen.append(headers.get("Authorization", ""))
        if path != "/v1/chat/completions":
            return 404, {}, {"error": {"message": f"no {path}"}}
        message = {"role": "assistant", "content": "four"}
        return 200, {}, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}

    return handler


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_sends_its_service_account_token_to_the_model(backend: str, tmp_path: Path) -> None:
    system = System(tmp_path / "system", backend=backend, env={"RUNNER_SERVICE_ACCOUNT": ACCOUNT})
    seen: list[str] = []
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"id": f"q{i}", "question": f"What is {i} + {i}?"} for i in range(QUESTIONS)]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    try:
        system.start()
        with serve(chat_model(seen)) as url:
            objects = example("serviceaccount-token")
            spec = find(objects, "InferenceConfig")["spec"]
            assert spec["model"]["auth"]["serviceAccountToken"]["audience"] == AUDIENCE
            spec["model"]["url"] = f"{url}/v1"
            for where, path in (("input", "questions.jsonl"), ("output", "answers")):
                spec["storage"][where]["file"].pop("volume")  # no claim: a path on this machine
                spec["storage"][where]["file"]["path"] = str(data / path)
            account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}}
            ns = system.namespace("sa-token")
            apply(system, ns, [account, *objects])
            status = wait_phase(system, ns, "serviceaccount-token-once", "Succeeded")
            config_map = system.get("configmap", status["configMapName"], ns)
    finally:
        system.stop()

    assert_counts(status, read=QUESTIONS, written=QUESTIONS)
    assert len(seen) == QUESTIONS and len(set(seen)) == 1, "one token for a short run"
    scheme, _, token = seen[0].partition(" ")
    assert scheme == "Bearer" and token.count(".") == 2
    said = claims(token)
    assert said["aud"] == [AUDIENCE]
    assert said["sub"] == f"system:serviceaccount:{ns}:{ACCOUNT}"
    assert said["exp"] - said["iat"] == 3600
    # No key anywhere: the ConfigMap holds the audience, never the token.
    assert config_map is not None and token not in json.dumps(config_map)
