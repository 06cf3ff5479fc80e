"""Tokens instead of keys, end to end on a real control plane: a ModelDeployment that accepts
only tokens of the cluster's own ServiceAccount issuer, and a run that calls it with a
projected token of its pod's ServiceAccount.

Real: etcd, kube-apiserver (its ServiceAccount issuer: TokenRequest, `/openid/v1/jwks`) and
kube-controller-manager (e2e/real; `kube-root-ca.crt` published into each namespace),
`longrun controller` as a process, the node agent (e2e/nodeagent) running each pod's containers
as local processes: `longrun-fetch`, KServe's server, nginx (the auth sidecar) asking
`longrun-token-check`, which reads the issuer's keys from the API server with its own projected
token and the cluster CA, and the runner, whose projected token (audience `iris.models`) the
node agent asks the API server for, as the kubelet does. `kubectl create token` for the tokens a
person sends. Faked: nothing; the model is a small sklearn iris classifier written here, and the
expired token is one the plane's own signing key made with a past `exp` (e2e/tokens.py).

Real control plane only: the emulator serves plain HTTP, and in-cluster clients (the verifier
reading the issuer's keys) speak TLS to the API server; tests/security/test_token_check_issuer.py
checks the verifier against the emulator's issuer. Skips with `real control plane:` when its
binaries are absent, and when the kserve peer env or nginx is missing (fails in CI).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.system import System
from e2e.tokens import ISSUER, expired_token
from tests.e2e.test_serving_real import (
    assert_pod_ran,
    digest,
    endpoint,
    models,
    running,
    succeeded,
    write_input,
)
from tests.local.test_serving import IRIS_ROWS, answers, write_iris_model

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]
__all__ = ["models"]  # the fixture, used by name
Obj = dict[str, Any]
AUDIENCE = "iris.models"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    from e2e.peers.fixtures import skip_or_fail
    from local.sidecars import ServeError, nginx_binary

    try:
        nginx_binary()
    except ServeError as exc:
        skip_or_fail(str(exc))
    started = System(tmp_path_factory.mktemp("system"), backend="real")
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("ALLOWED_SERVICE_ACCOUNTS", "scorer")
            started.start()
        yield started
    finally:
        started.stop()


def objects(ns: str, source: str, sha256: str, tmp: Path) -> str:
    return f"""\
apiVersion: v1
kind: ServiceAccount
metadata:
  name: scorer
---
apiVersion: longrun.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: iris
spec:
  model:
    source: {source}
    sha256: {sha256}
    format: sklearn
  runtime:
    kserve: {{protocol: v1}}
  auth:
    apiKeys: false
    oidc:
      issuer: {ISSUER}
      audiences: [{AUDIENCE}]
      jwksUri: https://kubernetes.default.svc/openid/v1/jwks
      claims:
        sub: [system:serviceaccount:{ns}:scorer]
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata:
  name: scored
spec:
  model:
    deploymentRef:
      name: iris
    inputFields: [x]
    auth:
      serviceAccountToken:
        audience: {AUDIENCE}
  storage:
    input:
      file:
        path: {tmp / "in.jsonl"}
        idField: id
    output:
      file:
        path: {tmp / "out"}
  runner:
    batchSize: 4
    maxFailedRecords: 0
  pod:
    serviceAccountName: scorer
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata:
  name: scored
spec:
  configRef:
    name: scored
  timeoutSeconds: 600
"""


def predict(url: str, token: str | None) -> tuple[int, str]:
    body = json.dumps({"instances": [IRIS_ROWS[0]["f"]]}).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def token(system: System, ns: str, account: str, audience: str) -> str:
    done = system.kubectl("create", "token", account, "-n", ns, "--audience", audience)
    return done.strip()


def test_a_run_calls_a_tokens_only_deployment_with_its_service_account_token(
    system: System, models: tuple[str, Path], tmp_path: Path
) -> None:
    base, folder = models
    write_iris_model(folder / "iris.joblib")
    ns = system.namespace("oidc")
    source, sha = f"{base}/iris.joblib", digest(folder / "iris.joblib")
    write_input(tmp_path, [{"id": r["id"], "x": r["f"]} for r in IRIS_ROWS])
    system.kubectl("apply", "-n", ns, "-f", "-", input=objects(ns, source, sha, tmp_path))

    obj = running(system, ns, "iris")

    assert obj["status"].get("apiKeySecret") is None  # no key Secret to copy anywhere
    assert system.get("secret", "iris-api-keys", ns) is None
    url = f"{endpoint(system, ns, 'iris')}/v1/models/iris:predict"
    assert predict(url, None)[0] == 401
    assert predict(url, token(system, ns, "scorer", AUDIENCE))[0] == 200
    wrong_audience = predict(url, token(system, ns, "scorer", "other.models"))
    assert wrong_audience == (401, '{"error": "wrong audience"}\n')
    system.kubectl("create", "serviceaccount", "intruder", "-n", ns)
    intruder = predict(url, token(system, ns, "intruder", AUDIENCE))
    assert intruder == (401, '{"error": "claim sub not allowed"}\n')
    assert system.handle is not None
    expired = predict(url, expired_token(system.handle, ns, "scorer"))
    assert expired == (401, '{"error": "token expired"}\n')
    assert_pod_ran(system, ns, "iris", containers={"server", "auth-proxy", "token-check"})

    run = succeeded(system, ns, "scored")

    assert run["status"]["result"]["recordsWritten"] == len(IRIS_ROWS)
    classes = {str(a["id"]): a["prediction"] for a in answers(tmp_path / "out")}
    assert classes == {"1": 0, "2": 2, "3": 1}  # setosa, virginica, versicolor
