"""`longrun-fetch` against real servers: S3 (moto), HTTPS (a local server with a self-signed
certificate), Hugging Face's layout through HF_ENDPOINT (a local server), and a PVC path.

Real: the program (in-process through `main`, and once as the installed console script),
boto3 against moto's S3 server, requests against stdlib HTTP(S) servers on 127.0.0.1,
the `openssl` CLI for the certificate, local files. Faked: nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from runners import fetch

MODEL = b"GGUF" + bytes(range(256)) * 64
SHA = hashlib.sha256(MODEL).hexdigest()
TOKEN = "hf_secret_token_value"


@contextmanager
def file_server(
    files: dict[str, bytes],
    *,
    token: str | None = None,
    tls: tuple[Path, Path] | None = None,
    fail: int = 0,
) -> Iterator[tuple[str, list[str]]]:
    """Serve `files` by path (GET); 401 without `Bearer <token>` when one is set; the first
    `fail` requests answer 503. Yields (base URL, paths requested)."""
    seen: list[str] = []
    failures = [fail]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            if failures[0] > 0:
                failures[0] -= 1
                self._reply(503, b"busy")
            elif token is not None and self.headers.get("Authorization") != f"Bearer {token}":
                self._reply(401, b"no")
            elif self.path.split("?")[0] in files:
                self._reply(200, files[self.path.split("?")[0]])
            else:
                self._reply(404, b"not found")

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        scheme = "https" if tls else "http"
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def termination_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "termination-log"
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(path))
    return path


def credentials(tmp_path: Path, **values: str) -> str:
    folder = tmp_path / "credentials"
    folder.mkdir(exist_ok=True)
    for name, value in values.items():
        (folder / name).write_text(value)
    return str(folder)


# -- S3 --------------------------------------------------------------------------------------


@pytest.fixture
def s3(moto_endpoint: str, s3_bucket: str) -> Any:
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.put_object(Bucket=s3_bucket, Key="iris/model.joblib", Body=MODEL)
    client.put_object(Bucket=s3_bucket, Key="repo/iris/1/model.onnx", Body=b"onnx")
    client.put_object(Bucket=s3_bucket, Key="repo/iris/config.pbtxt", Body=b"name: 'iris'")
    return client


def test_fetches_an_s3_object_checks_it_and_marks_it_complete(
    s3: Any, s3_bucket: str, moto_endpoint: str, tmp_path: Path
) -> None:
    dest = tmp_path / "cache" / "abc" / "model.joblib"
    keys = credentials(tmp_path, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    argv = [f"s3://{s3_bucket}/iris/model.joblib", str(dest), "--sha256", SHA]
    argv += ["--endpoint-url", moto_endpoint, "--credentials-dir", keys]
    assert fetch.main(argv) == 0
    assert dest.read_bytes() == MODEL
    assert fetch.marker_of(dest).exists() and not dest.with_name("model.joblib.partial").exists()


def test_mirrors_an_s3_prefix_into_a_directory(
    s3: Any, s3_bucket: str, moto_endpoint: str, tmp_path: Path
) -> None:
    dest = tmp_path / "repository"
    argv = [f"s3://{s3_bucket}/repo/", str(dest), "--endpoint-url", moto_endpoint]
    assert fetch.main(argv) == 0
    assert (dest / "iris" / "1" / "model.onnx").read_bytes() == b"onnx"
    assert (dest / "iris" / "config.pbtxt").exists()


def test_a_missing_object_exits_4_with_the_reason_in_the_termination_log(
    s3: Any, s3_bucket: str, moto_endpoint: str, tmp_path: Path, termination_log: Path
) -> None:
    argv = [f"s3://{s3_bucket}/nope.joblib", str(tmp_path / "m"), "--endpoint-url", moto_endpoint]
    assert fetch.main(argv) == 4
    said = termination_log.read_text()
    assert said.startswith("exit 4: s3://") and "nope.joblib" in said and "testing" not in said


def test_a_wrong_digest_exits_3_and_leaves_nothing_that_looks_complete(
    s3: Any, s3_bucket: str, moto_endpoint: str, tmp_path: Path
) -> None:
    dest = tmp_path / "model.joblib"
    argv = [f"s3://{s3_bucket}/iris/model.joblib", str(dest), "--sha256", "0" * 64]
    assert fetch.main([*argv, "--endpoint-url", moto_endpoint]) == 3
    assert not dest.exists() and not fetch.marker_of(dest).exists()
    assert not list(tmp_path.glob("*.partial"))


# -- HTTPS -----------------------------------------------------------------------------------


def test_fetches_over_https_with_a_private_ca_and_a_bearer_token(
    tmp_path: Path, server_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server_certificate[0]))
    keys = credentials(tmp_path, BEARER_TOKEN="s3cr3t")
    with file_server({"/m/model.json": MODEL}, token="s3cr3t", tls=server_certificate) as (
        url,
        _,
    ):
        dest = tmp_path / "model.json"
        argv = [f"{url}/m/model.json", str(dest), "--sha256", SHA, "--credentials-dir", keys]
        assert fetch.main(argv) == 0
        assert dest.read_bytes() == MODEL
        assert fetch.main([f"{url}/m/model.json", str(tmp_path / "x")]) == 4  # no token: 401


def test_an_untrusted_certificate_is_refused(
    tmp_path: Path, server_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with file_server({"/m": MODEL}, tls=server_certificate) as (url, _):
        assert fetch.main([f"{url}/m", str(tmp_path / "m")]) == 4


def test_transient_errors_are_retried(tmp_path: Path) -> None:
    with file_server({"/m": MODEL}, fail=2) as (url, seen):
        assert fetch.main([f"{url}/m", str(tmp_path / "m"), "--sha256", SHA]) == 0
        assert len(seen) == 3


def test_a_server_that_stays_down_exits_5(tmp_path: Path) -> None:
    with file_server({"/m": MODEL}, fail=10) as (url, _):
        assert fetch.main([f"{url}/m", str(tmp_path / "m"), "--sha256", SHA]) == 5


# -- Hugging Face through HF_ENDPOINT -------------------------------------------------------------


def hf_files() -> dict[str, bytes]:
    listing = {"siblings": [{"rfilename": "config.json"}, {"rfilename": "weights/model.gguf"}]}
    return {
        "/org/chat-GGUF/resolve/main/chat.Q4.gguf": MODEL,
        "/org/chat-GGUF/resolve/v2/chat.Q4.gguf": b"v2",
        "/api/models/org/chat-GGUF/revision/main": json.dumps(listing).encode(),
        "/org/chat-GGUF/resolve/main/config.json": b"{}",
        "/org/chat-GGUF/resolve/main/weights/model.gguf": MODEL,
    }


def test_fetches_a_hugging_face_file_through_hf_endpoint_with_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with file_server(hf_files(), token=TOKEN) as (url, seen):
        monkeypatch.setenv("HF_ENDPOINT", url)
        keys = credentials(tmp_path, HF_TOKEN=TOKEN)
        dest = tmp_path / "chat.gguf"
        argv = ["hf://org/chat-GGUF/chat.Q4.gguf", str(dest), "--sha256", SHA]
        assert fetch.main([*argv, "--credentials-dir", keys]) == 0
        assert dest.read_bytes() == MODEL
        pinned = tmp_path / "v2.gguf"
        assert (
            fetch.main(
                ["hf://org/chat-GGUF/chat.Q4.gguf@v2", str(pinned), "--credentials-dir", keys]
            )
            == 0
        )
        assert pinned.read_bytes() == b"v2"
        assert "/org/chat-GGUF/resolve/v2/chat.Q4.gguf" in seen


def test_fetches_a_whole_hugging_face_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with file_server(hf_files()) as (url, _):
        monkeypatch.setenv("HF_ENDPOINT", url)
        dest = tmp_path / "repo"
        assert fetch.main(["hf://org/chat-GGUF", str(dest)]) == 0
        assert (dest / "weights" / "model.gguf").read_bytes() == MODEL
        assert (dest / "config.json").read_bytes() == b"{}"


def test_what_is_already_there_is_not_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with file_server(hf_files()) as (url, seen):
        monkeypatch.setenv("HF_ENDPOINT", url)
        by_digest, by_marker = tmp_path / "a.gguf", tmp_path / "b.gguf"
        assert fetch.main(["hf://org/chat-GGUF/chat.Q4.gguf", str(by_digest), "--sha256", SHA]) == 0
        assert fetch.main(["hf://org/chat-GGUF/chat.Q4.gguf", str(by_marker)]) == 0
        count = len(seen)
        assert fetch.main(["hf://org/chat-GGUF/chat.Q4.gguf", str(by_digest), "--sha256", SHA]) == 0
        assert fetch.main(["hf://org/chat-GGUF/chat.Q4.gguf", str(by_marker)]) == 0
        assert len(seen) == count
        by_digest.write_bytes(b"tampered")
        assert fetch.main(["hf://org/chat-GGUF/chat.Q4.gguf", str(by_digest), "--sha256", SHA]) == 0
        assert by_digest.read_bytes() == MODEL and len(seen) == count + 1


# -- PVC ---------------------------------------------------------------------------------------


def test_a_pvc_model_is_checked_in_place_or_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mnt"
    (root / "models" / "llama").mkdir(parents=True)
    (root / "models" / "llama" / "m.gguf").write_bytes(MODEL)
    monkeypatch.setenv("LONGRUN_PVC_ROOT", str(root))
    in_place = root / "models" / "llama" / "m.gguf"
    assert fetch.main(["pvc://models/llama/m.gguf", str(in_place), "--sha256", SHA]) == 0
    assert fetch.main(["pvc://models/llama/m.gguf", str(in_place), "--sha256", "1" * 64]) == 3
    copy = tmp_path / "cache" / "model.onnx"
    assert fetch.main(["pvc://models/llama/m.gguf", str(copy)]) == 0
    assert copy.read_bytes() == MODEL
    assert fetch.main(["pvc://models/nothing", str(copy)]) == 4


def test_a_sha256_on_a_pvc_directory_is_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "mnt"
    (root / "models" / "repo" / "m" / "1").mkdir(parents=True)
    (root / "models" / "repo" / "m" / "1" / "model.onnx").write_bytes(MODEL)
    monkeypatch.setenv("LONGRUN_PVC_ROOT", str(root))
    in_place = root / "models" / "repo"
    assert fetch.main(["pvc://models/repo", str(in_place), "--sha256", SHA]) == 2
    assert "--sha256 checks one file, but pvc://models/repo is a directory" in (
        capsys.readouterr().err
    )
    assert fetch.main(["pvc://models/repo", str(in_place)]) == 0


def test_bad_arguments_exit_2(tmp_path: Path) -> None:
    assert fetch.main(["ftp://host/model", str(tmp_path / "m")]) == 2
    assert fetch.main(["https://host/m", str(tmp_path / "m"), "--sha256", "xyz"]) == 2
    assert fetch.main(["s3://bucket/prefix/", str(tmp_path / "m"), "--sha256", SHA]) == 2


def test_the_console_script_reports_its_exit_code(tmp_path: Path) -> None:
    with file_server({"/m": MODEL}) as (url, _):
        log = tmp_path / "log"
        done = subprocess.run(
            ["longrun-fetch", f"{url}/missing", str(tmp_path / "m")],
            capture_output=True,
            text=True,
            env={**os.environ, "TERMINATION_MESSAGE_PATH": str(log)},
            timeout=60,
        )
        assert done.returncode == 4, done.stderr
        assert "HTTP 404" in log.read_text()
