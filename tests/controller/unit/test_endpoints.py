"""The controller's HTTP endpoints under slow, stalled and excess clients.

Real: the endpoint's server on 127.0.0.1 (an ephemeral port), real TCP sockets as
clients, urllib for well-behaved requests, prometheus_client's exposition and its
text parser. Faked: nothing; the routes are plain functions (a probe that always
holds, a route that blocks until the test releases it).

Timing: the tests wait with generous timeouts and assert what happened (answered,
closed, how many connections and threads), never how fast.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.runtime.main import metrics_route
from controller.runtime.metrics import Metrics
from controller.runtime.serve import Endpoint, Limits, probe

HALF_A_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: controller\r\n"  # no blank line: stalls
PATIENCE = 20.0  # seconds: how long a test waits for something that should happen


def eventually(check: Callable[[], bool]) -> None:
    """Poll `check` until it holds; fail after PATIENCE seconds."""
    deadline = time.monotonic() + PATIENCE
    while not check():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def _get(port: int, path: str, *, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=PATIENCE) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def _stalled_clients(port: int, count: int, stack: ExitStack) -> list[socket.socket]:
    """`count` connections that each send half a request head and then nothing."""
    clients = []
    for _ in range(count):
        client = stack.enter_context(socket.create_connection(("127.0.0.1", port), PATIENCE))
        client.sendall(HALF_A_REQUEST)
        clients.append(client)
    return clients


def _is_closed_by_server(client: socket.socket) -> bool:
    """True once the server closed the connection (EOF or reset); waits up to PATIENCE."""
    client.settimeout(PATIENCE)
    try:
        return client.recv(1024) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def health() -> Iterator[Endpoint]:
    with Endpoint(0, {"/healthz": probe(lambda: True)}, host="127.0.0.1") as endpoint:
        yield endpoint


def test_probes_keep_answering_under_200_slow_clients(health: Endpoint) -> None:
    threads_before = threading.active_count()
    with ExitStack() as stack:
        _stalled_clients(health.port, 200, stack)
        assert _get(health.port, "/healthz")[::2] == (200, "ok\n")
        assert _get(health.port, "/healthz")[::2] == (200, "ok\n")
        assert health.connections <= Limits().connections
        # A connection is a coroutine, not a thread: only the route pool (2) may start, where
        # a thread per connection held 200. The margin is for other tests' stray threads.
        assert threading.active_count() - threads_before <= 10


def test_a_client_that_stalls_mid_request_is_disconnected() -> None:
    limits = Limits(header_timeout=0.2)
    endpoint = Endpoint(0, {"/healthz": probe(lambda: True)}, limits=limits)
    with endpoint, ExitStack() as stack:
        (client,) = _stalled_clients(endpoint.port, 1, stack)
        assert _is_closed_by_server(client)
        eventually(lambda: endpoint.connections == 0)


def test_a_client_that_trickles_its_request_is_disconnected() -> None:
    # The header timeout bounds the whole head, not the gap between two bytes.
    limits = Limits(header_timeout=0.5)
    endpoint = Endpoint(0, {"/healthz": probe(lambda: True)}, limits=limits)
    with endpoint, socket.create_connection(("127.0.0.1", endpoint.port), PATIENCE) as client:
        stop = threading.Event()

        def trickle() -> None:
            head = HALF_A_REQUEST + b"X-Padding: " + b"x" * 4000
            for byte in head:  # one byte every 50 ms: longer than PATIENCE in all
                if stop.wait(0.05):
                    return
                try:
                    client.sendall(bytes([byte]))
                except OSError:
                    return

        sender = threading.Thread(target=trickle)
        sender.start()
        try:
            assert _is_closed_by_server(client)
        finally:
            stop.set()
            sender.join(PATIENCE)


def test_connections_beyond_the_limit_close_the_oldest_stalled_ones() -> None:
    limits = Limits(connections=4, header_timeout=PATIENCE * 10)  # only the limit closes them
    endpoint = Endpoint(0, {"/healthz": probe(lambda: True)}, limits=limits)
    with endpoint, ExitStack() as stack:
        clients = _stalled_clients(endpoint.port, 10, stack)
        eventually(lambda: endpoint.connections == 4)
        assert all(_is_closed_by_server(c) for c in clients[:6])
        assert _get(endpoint.port, "/healthz")[::2] == (200, "ok\n")
        assert endpoint.connections <= 4


def test_a_new_connection_is_closed_when_every_slot_is_being_answered() -> None:
    release = threading.Event()

    def slow() -> tuple[int, str, str]:
        release.wait(PATIENCE)
        return 200, "text/plain", "done\n"

    with Endpoint(0, {"/slow": slow}, limits=Limits(connections=2)) as endpoint:
        answers: list[tuple[int, str, str]] = []
        waiting = [
            threading.Thread(target=lambda: answers.append(_get(endpoint.port, "/slow")))
            for _ in range(2)
        ]
        for thread in waiting:
            thread.start()
        eventually(lambda: endpoint.connections == 2)
        with socket.create_connection(("127.0.0.1", endpoint.port), PATIENCE) as extra:
            extra.sendall(b"GET /slow HTTP/1.1\r\nHost: controller\r\n\r\n")
            assert _is_closed_by_server(extra)
        release.set()
        for thread in waiting:
            thread.join(PATIENCE)
        assert [a[::2] for a in answers] == [(200, "done\n")] * 2


def test_listens_on_the_configured_address_only(health: Endpoint) -> None:
    assert health.address == "127.0.0.1"


def test_listens_on_ipv6_addresses() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    try:
        endpoint = Endpoint(0, {"/healthz": probe(lambda: True)}, host="::1")
    except OSError as exc:
        pytest.skip(f"::1 cannot be bound here: {exc}")
    with endpoint:
        assert endpoint.address == "::1"
        with socket.create_connection(("::1", endpoint.port), PATIENCE) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: controller\r\n\r\n")
            assert client.recv(1024).startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize(
    ("path", "method", "status"),
    [("/nope", "GET", 404), ("/healthz", "POST", 405), ("/healthz?verbose=1", "GET", 200)],
)
def test_answers_routes_by_path_and_method(
    health: Endpoint, path: str, method: str, status: int
) -> None:
    assert _get(health.port, path, method=method)[0] == status


def test_head_gets_the_status_without_a_body(health: Endpoint) -> None:
    assert _get(health.port, "/healthz", method="HEAD")[::2] == (200, "")


def test_an_oversized_request_head_is_refused() -> None:
    limits = Limits(header_timeout=PATIENCE * 10)  # only the size can close it
    endpoint = Endpoint(0, {"/healthz": probe(lambda: True)}, limits=limits)
    with endpoint, socket.create_connection(("127.0.0.1", endpoint.port), PATIENCE) as client:
        with suppress(OSError):  # closed while the client still sends: refused all the same
            client.sendall(HALF_A_REQUEST + b"X-Padding: " + b"x" * 16_384 + b"\r\n")
        assert _is_closed_by_server(client)
        assert _get(endpoint.port, "/healthz")[0] == 200


def test_a_malformed_request_line_gets_400(health: Endpoint) -> None:
    with socket.create_connection(("127.0.0.1", health.port), PATIENCE) as client:
        client.sendall(b"hello\r\n\r\n")
        assert client.recv(1024).startswith(b"HTTP/1.1 400 ")


def test_a_failing_route_answers_500_and_the_endpoint_goes_on() -> None:
    def broken() -> tuple[int, str, str]:
        raise RuntimeError("boom")

    routes = {"/broken": broken, "/healthz": probe(lambda: True)}
    with Endpoint(0, routes) as endpoint:
        assert _get(endpoint.port, "/broken")[0] == 500
        assert _get(endpoint.port, "/healthz")[0] == 200


class _Cluster:
    def phase_counts(self) -> dict[str, int]:
        return {"Running": 3}


class _Manager:
    def __init__(self) -> None:
        self.metrics = Metrics()
        self.cluster = _Cluster()


def test_metrics_endpoint_serves_the_prometheus_text_format_with_process_metrics() -> None:
    manager = _Manager()
    manager.metrics.reconcile_total.inc(result="success")
    with Endpoint(0, {"/metrics": metrics_route(manager)}) as endpoint:
        status, ctype, text = _get(endpoint.port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("longrun_runs", (("phase", "Running"),))] == 3
    ok = (("controller", "inferencerun"), ("result", "success"))
    assert samples[("controller_runtime_reconcile_total", ok)] == 1
    names = {name for name, _ in samples}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"} <= names
