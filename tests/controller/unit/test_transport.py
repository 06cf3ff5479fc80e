"""The controller's requests time out instead of hanging a worker; its sockets keep alive.

Real: controller.kube.Transport on the official client's ApiClient and urllib3, over real
sockets on localhost. Faked: the API server, a listening socket that accepts connections and
never answers (a half-dead server or a black-holed connection), or no listener at all.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from controller.core.ports import ApiError
from controller.kube import Transport, with_pool_size


@pytest.fixture
def silent_server() -> Iterator[str]:
    """The URL of a server that accepts connections and never sends a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def transport_for(url: str) -> Transport:
    configuration = k8s.Configuration()
    configuration.host = url
    configuration.retries = False  # one attempt, so the read timeout is the whole wait
    return Transport(k8s.ApiClient(configuration), timeout=(1.0, 0.3))


def send_in_thread(transport: Transport) -> list[BaseException]:
    """Send a GET on a thread; the exception it raised (the thread must end on its own)."""
    raised: list[BaseException] = []

    def send() -> None:
        try:
            transport.request("GET", "/api/v1/namespaces/default/configmaps")
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    thread.join(30)  # a bound for a hang, far above the 0.3 s read timeout; not a timing check
    assert not thread.is_alive(), "the request hung: no read timeout"
    return raised


def test_request_to_a_server_that_never_answers_fails_with_a_timeout(silent_server: str) -> None:
    raised = send_in_thread(transport_for(silent_server))
    assert len(raised) == 1 and isinstance(raised[0], ApiError)
    assert raised[0].status == 0  # transient: the work queue retries with backoff
    assert "timed out" in raised[0].message.lower()


def test_request_to_a_closed_port_fails_as_a_transient_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    raised = send_in_thread(transport_for(f"http://127.0.0.1:{port}"))
    assert len(raised) == 1 and isinstance(raised[0], ApiError) and raised[0].status == 0


def test_controller_connections_use_tcp_keepalive_for_silently_dead_watches() -> None:
    pooled = with_pool_size(k8s.ApiClient(k8s.Configuration()), 12)
    options = pooled.rest_client.pool_manager.connection_pool_kw["socket_options"]
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30) in options
    assert pooled.rest_client.pool_manager.connection_pool_kw["maxsize"] == 12
