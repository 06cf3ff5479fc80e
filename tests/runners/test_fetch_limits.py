"""What `longrun-fetch` may reach, follow, write and use (issue 26, finding 4): denied
networks, redirects, the size cap and the node's instance role, against real servers.

Real: the program (`runners.fetch.main` in-process, and once the installed console script),
requests against stdlib HTTP(S) servers on 127.0.0.1 / 127.0.0.2 / `localhost` (the
certificate from the real `openssl` CLI), Hugging Face's layout through HF_ENDPOINT, boto3
against moto's S3 server, and boto's own instance-metadata client against a stdlib server
that answers as the metadata service does (AWS_EC2_METADATA_SERVICE_ENDPOINT). Loopback
stands for the networks a cluster denies: each test denies its server's address with
`--denied-cidrs`. Faked: nothing.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runners import fetch

MODEL = b"GGUF" + bytes(range(256)) * 64
CREDENTIALS = json.dumps(
    {"Code": "Success", "AccessKeyId": "ASIAFAKE", "SecretAccessKey": "node-secret",
     "Token": "node-token", "Expiration": "2099-01-01T00:00:00Z"}
).encode()  # fmt: skip
Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Server:
    """A stdlib server whose answers a test sets per path; it records what it was asked."""

    url: str
    routes: dict[str, Reply | Callable[[], Iterator[bytes]]]
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [path for _, path, _ in self.seen]


@contextmanager
def server(host: str = "127.0.0.1", tls: tuple[Path, Path] | None = None) -> Iterator[Server]:
    served = Server("", {})

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            served.seen.append((self.command, self.path, dict(self.headers)))
            route = served.routes.get(self.path.split("?")[0], (404, {}, b"not found"))
            if callable(route):  # a body of unknown length, sent chunk by chunk
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for block in route():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
                self.wfile.write(b"0\r\n\r\n")
                return
            status, headers, body = route
            self.send_response(status)
            for name, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_HEAD = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer((host, 0), Handler)
    httpd.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    served.url = f"{'https' if tls else 'http'}://{host}:{httpd.server_address[1]}"
    try:
        yield served
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def termination_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "termination-log"
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(path))
    return path


@pytest.fixture
def trusted(server_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server_certificate[0]))


def moved(to: str, status: int = 302) -> Reply:
    return status, {"Location": to}, b""


def said(log: Path) -> str:
    return log.read_text()


# -- denied networks ---------------------------------------------------------------------------


def test_a_metadata_like_address_is_refused_before_anything_is_sent(
    tmp_path: Path, termination_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The finding: the credentials document was stored as the model, with exit 0.
    with server() as meta:
        meta.routes["/latest/meta-data/iam/security-credentials/node"] = (200, {}, CREDENTIALS)
        dest = tmp_path / "model.gguf"
        argv = [f"{meta.url}/latest/meta-data/iam/security-credentials/node", str(dest)]
        assert fetch.main([*argv, "--denied-cidrs", "169.254.0.0/16,127.0.0.1/32"]) == 2
        assert meta.seen == [] and not dest.exists() and not list(tmp_path.glob("*.partial"))
    line = said(termination_log)
    assert line.startswith("exit 2: http://127.0.0.1:")
    assert "127.0.0.1 is in 127.0.0.1/32, a network the controller setting DENIED_CIDRS" in line
    assert "denies to model downloads (longrun-fetch)" in line
    (err,) = capsys.readouterr().err.splitlines()  # one line on stderr
    assert err.startswith("longrun-fetch: http://127.0.0.1:") and "DENIED_CIDRS" in err


def test_a_host_name_is_checked_by_the_addresses_it_resolves_to(tmp_path: Path) -> None:
    with server() as meta:
        meta.routes["/m"] = (200, {}, MODEL)
        url = meta.url.replace("127.0.0.1", "localhost") + "/m"
        assert fetch.main([url, str(tmp_path / "m"), "--denied-cidrs", "127.0.0.0/8"]) == 2
        assert meta.seen == []


def test_an_s3_endpoint_on_a_denied_network_is_refused(
    moto_endpoint: str, s3_bucket: str, tmp_path: Path, termination_log: Path
) -> None:
    argv = [f"s3://{s3_bucket}/m.gguf", str(tmp_path / "m"), "--endpoint-url", moto_endpoint]
    assert fetch.main([*argv, "--denied-cidrs", "127.0.0.1/32"]) == 2
    assert "DENIED_CIDRS" in said(termination_log)


def test_hugging_face_through_a_denied_mirror_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with server() as hf:
        hf.routes["/org/repo/resolve/main/m.gguf"] = (200, {}, MODEL)
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        argv = ["hf://org/repo/m.gguf", str(tmp_path / "m"), "--denied-cidrs", "127.0.0.1/32"]
        assert fetch.main(argv) == 2
        assert hf.seen == []
        assert fetch.main(argv[:2]) == 0  # the same download, no network denied


# -- redirects ---------------------------------------------------------------------------------


def test_a_redirect_within_the_origin_is_followed_with_the_token(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "BEARER_TOKEN").write_text("s3cr3t")
    with server() as origin:
        origin.routes["/m"] = moved("/v2/m", 307)
        origin.routes["/v2/m"] = (200, {}, MODEL)
        argv = [f"{origin.url}/m", str(tmp_path / "m"), "--credentials-dir", str(keys)]
        assert fetch.main(argv) == 0
        assert origin.seen[1][2].get("Authorization") == "Bearer s3cr3t"


@pytest.mark.usefixtures("trusted")
def test_a_redirect_to_another_origin_is_refused_unless_its_host_is_allowed(
    tmp_path: Path, server_certificate: tuple[Path, Path], termination_log: Path
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "BEARER_TOKEN").write_text("s3cr3t")
    with server(tls=server_certificate) as origin, server(tls=server_certificate) as cdn:
        cdn_url = cdn.url.replace("127.0.0.1", "localhost")
        origin.routes["/m"] = moved(f"{cdn_url}/blob")
        cdn.routes["/blob"] = (200, {}, MODEL)
        argv = [f"{origin.url}/m", str(tmp_path / "m"), "--credentials-dir", str(keys)]
        assert fetch.main(argv) == 2
        assert cdn.seen == []
        line = said(termination_log)
        assert f"was redirected to {cdn_url}/blob" in line
        assert "SERVING_FETCH_REDIRECT_HOSTS (chart serving.fetch.redirectHosts)" in line
        assert fetch.main([*argv, "--redirect-hosts", "*.hf.co,localhost"]) == 0
        assert (tmp_path / "m").read_bytes() == MODEL
        assert "Authorization" not in cdn.seen[0][2]  # the token stays with the source


@pytest.mark.usefixtures("trusted")
def test_a_redirect_from_https_to_http_is_never_followed(
    tmp_path: Path, server_certificate: tuple[Path, Path], termination_log: Path
) -> None:
    with server(tls=server_certificate) as origin, server() as plain:
        origin.routes["/m"] = moved(f"{plain.url}/m")
        plain.routes["/m"] = (200, {}, MODEL)
        argv = [f"{origin.url}/m", str(tmp_path / "m"), "--redirect-hosts", "*"]
        assert fetch.main(argv) == 2
        assert plain.seen == []
        assert "from https to http is never followed" in said(termination_log)


@pytest.mark.parametrize("target", ["file:///etc/passwd", "http://user:pw@127.0.0.1:1/m"])
def test_a_redirect_to_another_scheme_or_with_credentials_is_refused(
    tmp_path: Path, target: str
) -> None:
    with server() as origin:
        origin.routes["/m"] = moved(target)
        assert fetch.main([f"{origin.url}/m", str(tmp_path / "m"), "--redirect-hosts", "*"]) == 2


@pytest.mark.usefixtures("trusted")
def test_every_redirect_passes_the_network_guard(
    tmp_path: Path, server_certificate: tuple[Path, Path], termination_log: Path
) -> None:
    with server(tls=server_certificate) as origin, server("127.0.0.2") as inside:
        origin.routes["/m"] = moved(f"{inside.url}/m".replace("http:", "https:"))
        argv = [f"{origin.url}/m", str(tmp_path / "m"), "--redirect-hosts", "*"]
        assert fetch.main([*argv, "--denied-cidrs", "127.0.0.2/32"]) == 2
        assert inside.seen == []
        assert "127.0.0.2 is in 127.0.0.2/32" in said(termination_log)


# -- the size cap -----------------------------------------------------------------------------


def test_an_announced_length_over_the_cap_is_refused_before_the_body_is_read(
    tmp_path: Path, termination_log: Path
) -> None:
    with server() as origin:
        origin.routes["/m"] = (200, {}, MODEL)
        dest = tmp_path / "m"
        assert fetch.main([f"{origin.url}/m", str(dest), "--max-size", "1Ki"]) == 2
        assert not dest.exists() and not list(tmp_path.glob("*.partial"))
    line = said(termination_log)
    assert "the model is larger than the cache allows (1Ki" in line
    assert "spec.cache.size" in line and "SERVING_CACHE_SIZE" in line
    with server() as origin:
        origin.routes["/m"] = (200, {}, MODEL)
        assert fetch.main([f"{origin.url}/m", str(dest), "--max-size", str(len(MODEL))]) == 0


def test_a_body_of_unknown_length_stops_at_the_cap(tmp_path: Path) -> None:
    sent: list[int] = []

    def endless() -> Iterator[bytes]:
        for _ in range(64):  # 64 MiB unless the client hangs up
            sent.append(1)
            yield b"x" * (1 << 20)

    with server() as origin:
        origin.routes["/m"] = endless
        dest = tmp_path / "m"
        assert fetch.main([f"{origin.url}/m", str(dest), "--max-size", "2Mi"]) == 2
        assert not dest.exists() and not list(tmp_path.glob("*.partial"))
    assert len(sent) < 64


def test_the_cap_counts_every_file_of_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = {"siblings": [{"rfilename": "a.bin"}, {"rfilename": "b.bin"}]}
    with server() as hf:
        hf.routes["/api/models/org/repo/revision/main"] = (200, {}, json.dumps(listing).encode())
        hf.routes["/org/repo/resolve/main/a.bin"] = (200, {}, b"a" * 600)
        hf.routes["/org/repo/resolve/main/b.bin"] = (200, {}, b"b" * 600)
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        assert fetch.main(["hf://org/repo", str(tmp_path / "r"), "--max-size", "1k"]) == 2
        assert fetch.main(["hf://org/repo", str(tmp_path / "r"), "--max-size", "1200"]) == 0


def test_an_s3_object_over_the_cap_is_refused(
    moto_endpoint: str, s3_bucket: str, tmp_path: Path
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.put_object(Bucket=s3_bucket, Key="m.gguf", Body=MODEL)
    argv = [f"s3://{s3_bucket}/m.gguf", str(tmp_path / "m"), "--endpoint-url", moto_endpoint]
    assert fetch.main([*argv, "--max-size", "10k"]) == 2
    assert fetch.main([*argv, "--max-size", "20Ki"]) == 0


@pytest.mark.parametrize("size", ["lots", "1.5.2Gi", "-1", "20GB"])
def test_a_cap_that_is_not_a_size_is_a_usage_error(tmp_path: Path, size: str) -> None:
    assert fetch.main(["https://host/m", str(tmp_path / "m"), "--max-size", size]) == 2


# -- the node's instance role ------------------------------------------------------------------


@contextmanager
def metadata_service() -> Iterator[Server]:
    """Answers as EC2's instance metadata service does (IMDSv2), handing out a role's keys."""
    with server() as imds:
        imds.routes["/latest/api/token"] = (200, {}, b"imds-token")
        imds.routes["/latest/meta-data/iam/security-credentials/"] = (200, {}, b"node-role")
        imds.routes["/latest/meta-data/iam/security-credentials/node-role"] = (200, {}, CREDENTIALS)
        yield imds


@pytest.fixture
def no_aws_credentials(s3_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials anywhere boto looks (after `s3_bucket`, which sets fake ones)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.mark.usefixtures("no_aws_credentials")
def test_s3_without_keys_never_asks_for_the_nodes_role_unless_allowed(
    moto_endpoint: str,
    s3_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    termination_log: Path,
) -> None:
    import boto3

    owner = boto3.client(
        "s3", endpoint_url=moto_endpoint, aws_access_key_id="a", aws_secret_access_key="b"
    )
    owner.put_object(Bucket=s3_bucket, Key="private.gguf", Body=MODEL)
    owner.put_object(Bucket=s3_bucket, Key="public.gguf", Body=MODEL, ACL="public-read")
    where = ["--endpoint-url", moto_endpoint]
    private = [f"s3://{s3_bucket}/private.gguf", str(tmp_path / "a"), *where]
    with metadata_service() as imds:
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url + "/")
        assert fetch.main(private) == 4  # unsigned, refused; the node's role is not asked
        assert imds.seen == []
        assert "SERVING_FETCH_INSTANCE_METADATA" in said(termination_log)
        assert fetch.main([f"s3://{s3_bucket}/public.gguf", str(tmp_path / "b"), *where]) == 0
        assert imds.seen == [] and (tmp_path / "b").read_bytes() == MODEL  # a public object
        assert "AWS_EC2_METADATA_DISABLED" not in os.environ  # restored after each fetch
        assert fetch.main([*private, "--allow-instance-metadata"]) == 0
        assert "/latest/meta-data/iam/security-credentials/node-role" in imds.paths


def test_the_controllers_command_line_runs_as_the_console_script(tmp_path: Path) -> None:
    with server() as meta:
        meta.routes["/m"] = (200, {}, CREDENTIALS)
        log = tmp_path / "log"
        done = subprocess.run(
            ["longrun-fetch", f"{meta.url}/m", str(tmp_path / "m"), "--max-size", "20Gi",
             "--denied-cidrs", "169.254.0.0/16,127.0.0.0/8", "--redirect-hosts", "*.hf.co"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "TERMINATION_MESSAGE_PATH": str(log)},
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert meta.seen == [] and "DENIED_CIDRS" in log.read_text()
        assert len(done.stderr.strip().splitlines()) == 1
