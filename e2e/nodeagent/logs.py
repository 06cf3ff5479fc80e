"""The kubelet's log endpoint for the agent's pods: `GET /containerLogs/{ns}/{pod}/{container}`.

kube-apiserver does not read container logs: it serves `pods/log` by calling the
kubelet of the pod's node, over HTTPS at the Node's address (`status.addresses`, in
the order `--kubelet-preferred-address-types` says) and port
(`status.daemonEndpoints.kubeletEndpoint.Port`), presenting its
`--kubelet-client-certificate` and checking the kubelet's certificate against
`--kubelet-certificate-authority`. So `kubectl logs` and the controller's progress
read (`pods/log?tailLines=..&limitBytes=..`) work on a real control plane only if
something answers there. This module is that something, for the node agent: TLS with
a serving certificate for the node's address; a client must present a certificate
signed by `--client-ca-file`, else 401 (a kubelet with anonymous auth off; one from
another CA fails the handshake). Without certificates it does what a kubelet does without
`--tls-cert-file`/`--client-ca-file`: a certificate of its own, anonymous requests
served (a real API server that checks kubelets then refuses it; the emulator, given no
`kubelet_client`, does not check). What it answers is logfiles.py's.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from e2e.real.certs import CertificateAuthority

from .logfiles import (
    Limited,
    LogError,
    PodLogs,
    instance_path,
    is_ended,
    log_folder,
    log_line,
    parse_options,
    stream_log,
)

# The worker writes the files through these (the format is logfiles.py's).
__all__ = ["KubeletTLS", "LogServer", "Lookup", "PodLogs", "log_folder", "log_line"]

log = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT = 10.0


@dataclass(frozen=True)
class KubeletTLS:
    """The kubelet's `--tls-cert-file`, `--tls-private-key-file` and `--client-ca-file`
    (None: anonymous requests are served, the kubelet's default without one)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


Lookup = Callable[[str, str], PodLogs | None]


# -- the server ----------------------------------------------------------------------------


def self_signed(directory: Path, node_name: str, *, hostname: str) -> KubeletTLS:
    """What a kubelet started without `--tls-cert-file` serves with: a certificate nobody
    vouches for (here from a throw-away CA), and no client CA (anonymous requests)."""
    directory.mkdir(parents=True, exist_ok=True)
    pair = CertificateAuthority(directory, name=f"{node_name}-self-signed").issue_kubelet(
        node_name, hostname=hostname
    )
    return KubeletTLS(pair.cert, pair.key)


class LogServer(ThreadingHTTPServer):
    """The kubelet's HTTPS endpoint for `/containerLogs`, one thread per request."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, lookup: Lookup, tls: KubeletTLS, *, host: str = "127.0.0.1", port: int = 0):
        self.lookup = lookup
        self.stopping = threading.Event()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(tls.cert, tls.key)
        self.requires_certificate = tls.client_ca is not None
        if tls.client_ca is not None:  # anonymous auth off: no certificate is a 401
            self.context.load_verify_locations(tls.client_ca)
            self.context.verify_mode = ssl.CERT_OPTIONAL
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> LogServer:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() waits for the next poll
            name="kubelet-logs",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, end the streams being followed, close the socket."""
        self.stopping.set()
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=5)
        self.server_close()

    def finish_request(self, request: Any, client_address: Any) -> None:
        """The TLS handshake happens here, on the request's thread, so a slow or silent
        client never holds up `accept`."""
        request.settimeout(HANDSHAKE_TIMEOUT)
        try:
            wrapped = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:  # an unknown CA, a plain-HTTP client...
            log.info("kubelet logs: TLS handshake with %s failed: %s", client_address, exc)
            return
        wrapped.settimeout(None)
        try:
            super().finish_request(wrapped, client_address)
        finally:
            with contextlib.suppress(OSError):
                wrapped.close()


class _Handler(BaseHTTPRequestHandler):
    server: LogServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet logs: " + format, *args)

    def do_GET(self) -> None:
        try:
            self._serve()
        except LogError as exc:
            self._error(exc.status, str(exc))
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away while following

    def _serve(self) -> None:
        if self.server.requires_certificate and not self.connection.getpeercert():
            raise LogError(401, "Unauthorized")
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if len(parts) != 4 or parts[0] != "containerLogs":
            raise LogError(404, "404 page not found")
        _, namespace, name, container = parts
        options = parse_options(parse_qs(url.query, keep_blank_values=True), now=datetime.now(UTC))
        found = self.server.lookup(namespace, name)
        if found is None:
            raise LogError(404, f'pod "{name}" does not exist')
        path = instance_path(found, container, previous=options.previous)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        out = _Chunked(self.wfile)
        stream_log(
            path,
            options,
            Limited(out, options.limit_bytes),
            ended=lambda: is_ended(self.server.lookup(namespace, name), path),
            stopping=self.server.stopping,
        )
        out.close()

    def _error(self, status: int, message: str) -> None:
        body = message.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Chunked:
    """HTTP/1.1 chunked transfer encoding over the handler's output (each write a chunk)."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        self.out.write(b"%x\r\n%s\r\n" % (len(data), data))

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        self.out.write(b"0\r\n\r\n")
        self.out.flush()
