"""External hosts end to end, on both backends: llama.cpp servers as InferenceHosts, an
InferenceModel of two replicas published as a Service and an EndpointSlice, runs through it,
and a replica that moves when its host stops.

Real: the Kubernetes of LONGRUN_KUBE_BACKEND (the emulator, or kube-apiserver, etcd and
kube-controller-manager), `longrun controller` as a process (its host prober calling the
hosts over HTTP, through its address guard), the node agent running the runner pods as
local processes, `kubectl` for every user action, and three real llama.cpp servers
(llama-cpp-python, e2e/peers, `openai` admin protocol), each in a network namespace of its
own with a veth pair and an address of 198.18.0.0/15 (e2e/netns.py), since kube-apiserver
refuses loopback addresses in an EndpointSlice and longrun refuses them for a host. The
runner reaches a host through the node agent's Service resolution (the EndpointSlice's
ready address) and this machine's route to the veth; the controller's DENIED_CIDRS is left
empty here, and the chart's default (metadata networks) does not hold 198.18.0.0/15 either.
Faked: nothing; the GGUF model is llama_server.py's tiny random one.

What "moves" means with this fleet: the InferenceModel wants 2 replicas; two hosts register
and serve them; a third (the spare) registers; the first host's server is stopped, it fails
FLEET_FAILURE_THRESHOLD health checks, its replica leaves the EndpointSlice and is placed on
the spare. Without a spare the model would stay Degraded with one replica (tested in
tests/controller/unit/fleets/test_placement.py).

Skips with one line where network namespaces cannot be made (not root, no `ip`), or the
llama peer env is missing; fails instead in CI.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import netns
from e2e.fixtures import eventually
from e2e.peers.server import PeerServer
from e2e.system import System
from tests.e2e.test_examples import diagnose

pytestmark = [pytest.mark.slow, pytest.mark.requires_service]
Obj = dict[str, Any]
MODEL = "tiny-chat"
PROMPTS = 4
WAIT = 120.0


@pytest.fixture
def hosts() -> Iterator[list[tuple[netns.NetworkHost, PeerServer]]]:
    """Three llama.cpp servers, each in its own network namespace, serving `tiny-chat`."""
    from e2e.peers.fixtures import skip_or_fail
    from e2e.peers.server import start

    if (why := netns.unavailable()) is not None:
        skip_or_fail(f"external hosts need network namespaces: {why}")
    started: list[tuple[netns.NetworkHost, PeerServer]] = []
    try:
        for index in range(3):
            space = netns.NetworkHost(index).open()
            started.append((space, None))  # type: ignore[arg-type]
            server = start(
                "llama-chat",
                ports={"http": 8080},
                host=space.address,
                prefix=space.prefix,
                model_name=MODEL,
            )
            started[-1] = (space, server)
        yield started
    except OSError as exc:
        skip_or_fail(f"real llama-chat server unavailable in a network namespace: {exc}")
    finally:
        for space, server in started:
            if server is not None:
                server.stop()
            space.close()


@pytest.fixture
def fleet_system(start_system: Any, monkeypatch: pytest.MonkeyPatch) -> System:
    """The whole system, its controller checking hosts every second."""
    monkeypatch.setenv("FLEET_HEALTH_INTERVAL", "1s")
    monkeypatch.setenv("FLEET_FAILURE_THRESHOLD", "2")
    monkeypatch.setenv("DENIED_CIDRS", "169.254.0.0/16,fe80::/10")  # the chart's kind of list
    system: System = start_system()
    return system


def host_yaml(name: str, address: str) -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceHost
metadata:
  name: {name}
  labels: {{pool: cpu}}
spec:
  endpoint: http://{address}:8080
  adminProtocol: openai
  capacity: {{slots: 1}}
"""


def model_yaml() -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceModel
metadata:
  name: {MODEL}
spec:
  model: {MODEL}
  replicas: 2
  hostSelector:
    matchLabels: {{pool: cpu}}
"""


def run_yaml(name: str, tmp: Path) -> str:
    return f"""\
apiVersion: longrun.dev/v1alpha1
kind: InferenceConfig
metadata:
  name: {name}
spec:
  model:
    deploymentRef: {{kind: InferenceModel, name: {MODEL}}}
    maxTokens: 4
  storage:
    input:
      file: {{path: {tmp / name / "in.jsonl"}, idField: id}}
    output:
      file: {{path: {tmp / name / "out"}}}
  runner: {{batchSize: 2, maxFailedRecords: 0}}
---
apiVersion: longrun.dev/v1alpha1
kind: InferenceRun
metadata:
  name: {name}
spec:
  configRef: {{name: {name}}}
  timeoutSeconds: 300
"""


def placed(system: System, ns: str) -> tuple[Obj, set[str]] | None:
    """The InferenceModel's status and its Ready hosts, once readyReplicas is 2."""
    obj = system.get("inferencemodel", MODEL, ns) or {}
    status = obj.get("status") or {}
    ready = {p["host"] for p in status.get("placements") or [] if p.get("state") == "Ready"}
    return (status, ready) if status.get("readyReplicas") == 2 and len(ready) == 2 else None


def slice_addresses(system: System, ns: str) -> dict[str, bool]:
    """Address -> ready, over the InferenceModel's EndpointSlices."""
    found: dict[str, bool] = {}
    for item in system.items("endpointslices", ns, f"kubernetes.io/service-name={MODEL}"):
        for endpoint in item.get("endpoints") or []:
            found[endpoint["addresses"][0]] = bool(endpoint["conditions"].get("ready"))
    return found


def columns(system: System, kind: str, ns: str) -> list[str]:
    """The header `kubectl get KIND` prints (the CRD's printer columns)."""
    return system.kubectl("get", kind, "-n", ns).splitlines()[0].split()


def run_through(system: System, ns: str, name: str, tmp: Path) -> Obj:
    """Apply a config and run naming the InferenceModel; the run once it succeeded."""
    (tmp / name).mkdir(parents=True)
    rows = [{"id": str(i), "prompt": f"say {i}"} for i in range(PROMPTS)]
    (tmp / name / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    system.kubectl("apply", "-n", ns, "-f", "-", input=run_yaml(name, tmp))

    def succeeded() -> Obj | None:
        run = system.get("inferencerun", name, ns) or {}
        phase = (run.get("status") or {}).get("phase")
        assert phase != "Failed", json.dumps(run.get("status"), indent=1)
        return run if phase == "Succeeded" else None

    try:
        found: Obj = eventually(succeeded, timeout=WAIT, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(system, ns)}") from None
    return found


def test_two_hosts_serve_a_model_and_a_stopped_hosts_replica_moves_to_the_spare(
    fleet_system: System, hosts: list[tuple[netns.NetworkHost, PeerServer]], tmp_path: Path
) -> None:
    system = fleet_system
    ns = system.namespace("fleet")
    (a, server_a), (b, _), (spare, _) = hosts
    system.kubectl("apply", "-n", ns, "-f", "-", input=host_yaml("host-a", a.address))
    system.kubectl("apply", "-n", ns, "-f", "-", input=host_yaml("host-b", b.address))
    system.kubectl("apply", "-n", ns, "-f", "-", input=model_yaml())

    status, ready = eventually(lambda: placed(system, ns), timeout=WAIT, interval=0.5)

    assert ready == {"host-a", "host-b"}
    assert status["endpoint"] == f"http://{MODEL}.{ns}.svc.cluster.local:8080"
    assert status["modelName"] == MODEL and status["phase"] == "Ready"
    assert slice_addresses(system, ns) == {a.address: True, b.address: True}
    service = system.get("service", MODEL, ns)
    assert service is not None and not service["spec"].get("selector")
    assert columns(system, "imodel", ns) == ["NAME", "MODEL", "REPLICAS", "READY", "AGE"]
    assert system.kubectl("get", "imodel", MODEL, "-n", ns).split()[5:9] == [
        MODEL, MODEL, "2", "2",
    ]  # fmt: skip
    assert columns(system, "ihost", ns) == ["NAME", "ENDPOINT", "READY", "MODELS", "AGE"]
    host = system.get("inferencehost", "host-a", ns) or {}
    assert host["status"]["ready"] is True and host["status"]["models"] == [MODEL]
    assert host["status"]["address"] == a.address
    first = run_through(system, ns, "first", tmp_path)
    assert first["status"]["result"]["recordsWritten"] == PROMPTS

    system.kubectl("apply", "-n", ns, "-f", "-", input=host_yaml("host-spare", spare.address))
    eventually(
        lambda: (
            (system.get("inferencehost", "host-spare", ns) or {}).get("status", {}).get("ready")
        ),
        timeout=WAIT,
    )
    server_a.stop()  # host-a's daemon goes away: its health checks fail
    stopped = time.monotonic()

    status, ready = eventually(
        lambda: (found := placed(system, ns)) and "host-a" not in found[1] and found,
        timeout=WAIT,
        interval=0.5,
    )

    assert ready == {"host-b", "host-spare"}
    assert slice_addresses(system, ns) == {b.address: True, spare.address: True}
    print(f"\nreplica moved and ready {time.monotonic() - stopped:.1f} s after its host stopped "
          f"(health interval 1 s, threshold 2, {system.backend})")  # fmt: skip
    lost = system.get("inferencehost", "host-a", ns) or {}
    assert lost["status"]["ready"] is False
    condition = next(c for c in lost["status"]["conditions"] if c["type"] == "Ready")
    assert condition["reason"] == "HealthCheckFailed", condition
    assert "connection refused" in lost["status"]["lastError"]
    second = run_through(system, ns, "second", tmp_path)
    assert second["status"]["result"]["recordsWritten"] == PROMPTS
