"""Where models come from in tests of `longrun serve`: local stand-ins for the stores the
serving examples name (Hugging Face, an HTTPS host, S3).

Why real servers: `longrun-fetch` is run as the init container runs it, with requests and
boto3 talking to a socket, so the stand-ins must speak the wire protocols. A file server
(`serve_files`) answers `GET /path` with files from a dict, over HTTP (an `HF_ENDPOINT`: the
paths are `/{org}/{repo}/resolve/{revision}/{file}`) or HTTPS with a certificate from a
throw-away CA (`tls_files`; the client trusts it through `REQUESTS_CA_BUNDLE`). S3 is moto's
server (`tests/conftest.py`, `moto_endpoint`); `put_s3_object` fills it.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TlsFiles:
    """A server certificate and key for 127.0.0.1, and the CA bundle that trusts it."""

    cert: Path
    key: Path
    ca_bundle: Path


def tls_files(directory: Path) -> TlsFiles:
    """A throw-away CA and a certificate for 127.0.0.1/localhost, as PEM files."""
    from e2e.real.certs import CertificateAuthority

    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory, name="longrun-test-model-store")
    pair = ca.issue_server("model-store", ips=("127.0.0.1",), names=("localhost",))
    return TlsFiles(pair.cert, pair.key, ca.cert_path)


@contextmanager
def serve_files(files: Mapping[str, bytes], *, tls: TlsFiles | None = None) -> Iterator[str]:
    """Serve `files` (URL path → content) on 127.0.0.1; yields the base URL. Anything else
    is a 404, as a store answers for a missing object."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path.split("?", 1)[0])
            self.send_response(200 if body is not None else 404)
            data = body if body is not None else b"not found"
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls.cert), str(tls.key))
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        scheme = "https" if tls is not None else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def put_s3_object(endpoint: str, bucket: str, key: str, body: bytes) -> None:
    """Create `bucket` (if needed) on an S3 endpoint and put one object (dummy keys)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key=key, Body=body)
