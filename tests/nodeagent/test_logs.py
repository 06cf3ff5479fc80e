"""`pods/log` of pods the node agent runs: the API server asks the agent's kubelet endpoint.

Real: both backends. On the real control plane, kube-apiserver connects to the Node's
InternalIP and `daemonEndpoints.kubeletEndpoint.Port` over HTTPS with its
`--kubelet-client-certificate`, checking the agent's serving certificate against the
cluster CA (`--kubelet-certificate-authority`); on the emulator (built-in kubelet off),
`e2e/emulator/kubeletproxy.py` does the same with `EmulatorConfig.kubelet_client` and a
CA made for the test. The agent's log server (e2e/nodeagent/logs.py), its processes
(`python -c ...`), the real `kubectl logs` and the official client's
`read_namespaced_pod_log`. Faked: nothing.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.emulator.kubeletproxy import KubeletClient
from e2e.fixtures import eventually
from e2e.nodeagent.__main__ import kubelet_tls, parse_args
from e2e.nodeagent.logs import KubeletTLS
from e2e.real.certs import CertificateAuthority, kubelet_pki
from e2e.real.handle import RealClusterHandle
from tests.nodeagent.conftest import BACKENDS, Cluster, backend_handle, phase

TEN_LINES = "for i in range(10): print(f'line-{i}', flush=True)"
BOTH_STREAMS = (
    "import sys, time\n"
    "print('to stdout', flush=True)\n"
    "time.sleep(0.05)\n"
    "print('to stderr', file=sys.stderr, flush=True)\n"
)
# First run: prints `first` and fails; the restart (same volume) prints `second`, succeeds.
FAILS_ONCE = (
    "import os, sys\n"
    "marker = '/tmp/' + os.environ['MARKER']\n"
    "if not os.path.exists(marker):\n"
    "    open(marker, 'w').close(); print('first', flush=True); sys.exit(1)\n"
    "os.remove(marker); print('second', flush=True)\n"
)
SLOW_TWO = "import time\nprint('a', flush=True)\ntime.sleep(1.5)\nprint('b', flush=True)\n"
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z line-\d$")


@dataclass
class Served:
    """A cluster whose agent serves logs, and what a client of that server would hold."""

    cluster: Cluster
    ca: Path  # signs the agent's serving certificate and the API server's client one

    @property
    def core(self) -> Any:  # the official client, used as users do (untyped answers)
        return self.cluster.core

    @property
    def ns(self) -> str:
        return self.cluster.ns

    @property
    def port(self) -> int:
        """Where the agent's log server listens."""
        assert self.cluster.agent.logs is not None
        return self.cluster.agent.logs.port

    def run(self, name: str, script: str, *, until: str = "Succeeded", **spec: object) -> None:
        self.cluster.create_pod(name, script, **spec)
        self.cluster.wait_phase(name, until)

    def kubectl_logs(self, *args: str) -> str:
        done = self.cluster.handle.kubectl("logs", "-n", self.ns, *args, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def log(self, name: str, **options: object) -> str:
        return str(self.core.read_namespaced_pod_log(name, self.ns, **options))


@pytest.fixture(params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """A backend whose API server can reach kubelets, and a node agent serving logs."""
    hostname = socket.gethostname()
    pki = None
    if request.param == "real":
        handle = backend_handle(request, "real")
    else:  # the emulator has no PKI: one made for the test, as kube-apiserver's flags would
        pki = kubelet_pki(tmp_path / "pki", hostname=hostname)
        kubelet_client = KubeletClient(pki.client.cert, pki.client.key, pki.ca)
        factory = request.getfixturevalue("kube_emulator_factory")
        handle = factory(agent=False, job_backoff_seconds=1.0, kubelet_client=kubelet_client)
    api = handle.api_client()
    ns = handle.namespace("logs")
    cluster = Cluster(handle, ns, tmp_path, api, client.CoreV1Api(api), client.BatchV1Api(api))
    if pki is not None:
        ca, serving = pki.ca, pki.serving
    else:
        assert isinstance(handle, RealClusterHandle)
        ca = handle.plane.ca_cert_path
        serving = handle.plane.issue_kubelet_certificate(cluster.node_name, hostname=hostname)
    cluster.start_agent(kubelet_tls=KubeletTLS(serving.cert, serving.key, ca))
    try:
        yield Served(cluster, ca)
    finally:
        for agent in cluster.agents:
            agent.stop()
        cluster.core.delete_node(cluster.node_name, _preload_content=False)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_the_node_publishes_the_log_servers_address_and_port(served: Served) -> None:
    node = served.core.read_node(served.cluster.node_name)
    port = served.port
    assert node.status.daemon_endpoints.kubelet_endpoint.port == port
    addresses = {a.type: a.address for a in node.status.addresses}
    assert addresses["InternalIP"] == "127.0.0.1"
    assert addresses["Hostname"] == socket.gethostname()


def test_kubectl_logs_shows_stdout_and_stderr_in_the_order_written(served: Served) -> None:
    served.run("both", BOTH_STREAMS)

    assert served.kubectl_logs("both") == "to stdout\nto stderr\n"


def test_read_pod_log_honours_tail_lines_and_limit_bytes(served: Served) -> None:
    served.run("ten", TEN_LINES)

    assert served.log("ten") == "".join(f"line-{i}\n" for i in range(10))
    assert served.log("ten", tail_lines=3) == "line-7\nline-8\nline-9\n"
    assert served.log("ten", limit_bytes=10) == "line-0\nlin"
    assert served.log("ten", tail_lines=2, limit_bytes=9) == "line-8\nli"  # tail, then limit
    assert served.log("ten", tail_lines=0) == ""
    assert served.kubectl_logs("ten", "--tail=1") == "line-9\n"


def test_timestamps_prefix_each_line_with_the_time_it_was_written(served: Served) -> None:
    served.run("stamped", TEN_LINES)

    lines = served.log("stamped", timestamps=True, tail_lines=4).splitlines()
    assert len(lines) == 4 and all(STAMPED.match(line) for line in lines), lines
    assert lines == sorted(lines)  # the times only grow
    assert served.log("stamped", since_seconds=3600) == served.log("stamped")
    assert served.kubectl_logs("stamped", "--since-time=2099-01-01T00:00:00Z") == ""


def test_previous_serves_the_instance_before_the_restart(served: Served) -> None:
    marker = f"longrun-logs-{served.ns}"
    env = [{"name": "MARKER", "value": marker}]
    served.run("twice", FAILS_ONCE, restartPolicy="OnFailure", container={"env": env})

    assert served.log("twice") == "second\n"
    assert served.log("twice", previous=True) == "first\n"
    assert served.kubectl_logs("twice", "--previous") == "first\n"


def test_previous_without_a_restart_is_refused_in_the_kubelets_words(served: Served) -> None:
    served.run("once", TEN_LINES)

    with pytest.raises(client.ApiException) as refused:
        served.log("once", previous=True)

    assert refused.value.status == 400
    message = json.loads(str(refused.value.body))["message"]
    assert message == 'previous terminated container "main" in pod "once" not found'


def test_a_container_that_never_started_has_no_log_to_show(served: Served) -> None:
    served.cluster.create_pod(
        "unpulled", "print(1)", container={"command": None, "image": "nope:1"}
    )
    served.cluster.wait_pod("unpulled", lambda pod: "waiting" in _state(pod))

    done = served.cluster.handle.kubectl("logs", "-n", served.ns, "unpulled")

    assert done.returncode == 1
    assert 'container "main" in pod "unpulled" is waiting to start: ' in done.stderr
    assert "image can't be pulled" in done.stderr or "failing to pull image" in done.stderr


def _state(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0].get("state") or {})


def test_follow_streams_until_the_container_ends(served: Served) -> None:
    served.cluster.create_pod("slow", SLOW_TWO)
    served.cluster.wait_phase("slow", "Running")
    eventually(lambda: served.log("slow") == "a\n", timeout=10)

    followed = served.kubectl_logs("slow", "--follow")  # returns once the container ended

    assert followed == "a\nb\n"
    assert phase(served.cluster.wait_phase("slow", "Succeeded")) == "Succeeded"


def test_a_client_without_a_certificate_from_the_cluster_ca_is_refused(served: Served) -> None:
    served.run("secret", TEN_LINES)
    port = served.port
    path = f"/containerLogs/{served.ns}/secret/main"

    anonymous = ssl.create_default_context(cafile=str(served.ca))
    assert _get(port, path, anonymous) == (401, "Unauthorized")

    stranger = CertificateAuthority(_mkdir(served.cluster.tmp / "other-pki"))
    pair = stranger.issue_client(
        "intruder", common_name="intruder", organizations=("system:masters",)
    )
    foreign = ssl.create_default_context(cafile=str(served.ca))
    foreign.load_cert_chain(pair.cert, pair.key)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _get(port, path, foreign)


def _get(port: int, path: str, context: ssl.SSLContext) -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode().strip()
    finally:
        conn.close()


def test_an_agent_without_certificates_serves_anyone_and_a_checking_server_refuses_it(
    cluster: Cluster,
) -> None:
    """The kubelet's defaults (its own certificate, anonymous clients): the emulator given no
    `kubelet_client` reads the log; kube-apiserver, which checks kubelets against the cluster
    CA, refuses the unknown certificate."""
    cluster.create_pod("plain", TEN_LINES)
    cluster.wait_phase("plain", "Succeeded")

    done = cluster.handle.kubectl("logs", "-n", cluster.ns, "plain", "--tail=2")

    if cluster.backend == "emulator":
        assert (done.returncode, done.stdout) == (0, "line-8\nline-9\n"), done.stderr
    else:
        assert done.returncode == 1
        assert "certificate signed by unknown authority" in done.stderr, done.stderr


def test_the_command_takes_its_certificates_in_pairs(tmp_path: Path) -> None:
    pki = kubelet_pki(tmp_path, hostname="host")
    cert, key, ca = (str(pki.serving.cert), str(pki.serving.key), str(pki.ca))
    args = ["--kubeconfig", "k", "--tls-cert-file", cert, "--tls-private-key-file", key]

    assert kubelet_tls(parse_args(["--kubeconfig", "k"])) is None  # self-signed, anonymous
    assert kubelet_tls(parse_args(args)) == KubeletTLS(pki.serving.cert, pki.serving.key)
    with_ca = KubeletTLS(pki.serving.cert, pki.serving.key, pki.ca)
    assert kubelet_tls(parse_args([*args, "--client-ca-file", ca])) == with_ca
    with pytest.raises(SystemExit, match="go together"):
        kubelet_tls(parse_args(args[:4]))
    with pytest.raises(SystemExit, match="needs them"):
        kubelet_tls(parse_args(["--kubeconfig", "k", "--client-ca-file", ca]))
    with pytest.raises(SystemExit, match=r"no such file: .*missing\.crt"):
        kubelet_tls(parse_args([*args, "--client-ca-file", str(tmp_path / "missing.crt")]))
