"""TLS for the `http` and `krateo` storage backends: trusted, untrusted, badly configured.

Real: the backends, the runner in-process (contract file -> exit code), stdlib HTTPS servers
on 127.0.0.1 (http_stub.serve with a certificate made by the real `openssl` CLI; it is its own
CA), Secret files laid out as the controller mounts them. Faked: the model (FakeModel
registered in place of `kserve-v2`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import pytest
from fakes import FakeModel, contract
from http_stub import Receiver, serve

from contracts.storage import HttpStorage, KrateoStorage
from runners import cli, registry
from runners.api import ConfigError, OutputRecord, RunContext
from runners.storage.http import HttpBackend
from runners.storage.krateo import KrateoBackend

Cert = tuple[Path, Path]
RECORD = OutputRecord("a", 0, {"x": 1}, 2)


def ctx(secrets: Path) -> RunContext:
    return RunContext("uid-9", "job-9", {"p": "1"}, str(secrets))


def secret(root: Path, name: str, key: str, value: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / key).write_text(value)


def http(url: str, **tls: Any) -> HttpStorage:
    return HttpStorage.model_validate({"url": url, **({"tls": tls} if tls else {})})


def krateo(path: str) -> KrateoStorage:
    return KrateoStorage.model_validate({"api": {"endpointRef": {"name": "e"}, "path": path}})


@pytest.fixture(autouse=True)
def other_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CA bundle in the environment, as many images set: the configured CA must still win."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", certifi.where())


def test_http_output_trusts_the_ca_from_the_secret(
    tmp_path: Path, server_certificate: Cert
) -> None:
    secret(tmp_path, "ca", "ca.crt", server_certificate[0].read_text())
    receiver = Receiver()
    with serve(receiver, tls=server_certificate) as url:
        settings = http(url + "/out", caSecretRef={"name": "ca", "key": "ca.crt"})
        sink = HttpBackend().open_sink(settings, ctx(tmp_path), role="output")
        sink.write_chunk(0, [RECORD])
        sink.close()
    assert [key[2] for key in receiver.chunks] == [0]


def test_http_untrusted_certificate_is_a_config_error_naming_the_ca_setting(
    tmp_path: Path, server_certificate: Cert
) -> None:
    with serve(Receiver(), tls=server_certificate) as url:
        sink = HttpBackend().open_sink(http(url + "/out"), ctx(tmp_path), role="output")
        with pytest.raises(ConfigError, match=r"^url: POST .*TLS certificate not trusted") as exc:
            sink.write_chunk(0, [RECORD])
        sink.close()
    assert "self-signed certificate" in str(exc.value) and "tls.caSecretRef" in str(exc.value)


def test_http_missing_ca_bundle_is_a_config_error_when_opening(tmp_path: Path) -> None:
    settings = http("https://api.invalid/out", caSecretRef={"name": "ca", "key": "ca.crt"})
    with pytest.raises(ConfigError, match=r"^tls\.caSecretRef: the CA bundle is not mounted"):
        HttpBackend().open_sink(settings, ctx(tmp_path), role="output")


def test_http_ca_bundle_that_is_not_pem_is_a_config_error_when_opening(tmp_path: Path) -> None:
    secret(tmp_path, "ca", "ca.crt", "not a certificate")
    settings = http("https://api.invalid/in", caSecretRef={"name": "ca", "key": "ca.crt"})
    with pytest.raises(ConfigError, match=r"^tls\.caSecretRef: .* is not a PEM CA bundle"):
        HttpBackend().open_source(settings, ctx(tmp_path))


def test_krateo_trusts_certificate_authority_data(tmp_path: Path, server_certificate: Cert) -> None:
    receiver = Receiver([{"v": 1}])
    with serve(receiver, tls=server_certificate) as url:
        secret(tmp_path, "e", "server-url", url)
        secret(tmp_path, "e", "certificate-authority-data", server_certificate[0].read_text())
        source = KrateoBackend().open_source(krateo("/compute/input"), ctx(tmp_path))
        assert [r.data for r in source.records(0)] == [{"v": 1}]
        source.close()


def test_krateo_untrusted_certificate_is_a_config_error_naming_the_secret_key(
    tmp_path: Path, server_certificate: Cert
) -> None:
    with serve(Receiver(), tls=server_certificate) as url:
        secret(tmp_path, "e", "server-url", url)
        sink = KrateoBackend().open_sink(krateo("/compute/out"), ctx(tmp_path), role="output")
        with pytest.raises(ConfigError, match=r"^api\.path: POST .*TLS certificate not trusted"):
            sink.write_chunk(0, [RECORD])
        sink.close()


def test_krateo_certificate_authority_data_that_is_no_ca_is_a_config_error_when_opening(
    tmp_path: Path,
) -> None:
    secret(tmp_path, "e", "server-url", "https://finops.invalid")
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    secret(tmp_path, "e", "certificate-authority-data", pem)
    with pytest.raises(ConfigError, match=r"^api\.endpointRef: .* is not a PEM CA bundle"):
        KrateoBackend().open_source(krateo("/compute/input"), ctx(tmp_path))


@pytest.fixture
def model() -> Iterator[FakeModel]:
    fake = FakeModel()
    registry.model_protocols.register("kserve-v2", fake.factory)
    yield fake
    registry.model_protocols.unregister("kserve-v2")


def test_run_writing_to_an_untrusted_https_output_exits_2_without_retrying(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    server_certificate: Cert,
    model: FakeModel,
) -> None:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    (tmp_path / "in.jsonl").write_text('{"v": 1}\n')
    receiver = Receiver()
    with serve(receiver, tls=server_certificate) as url:
        doc = contract(
            input={"file": {"path": str(tmp_path / "in.jsonl")}},
            output={"http": {"url": url + "/out"}},
            runner={"maxAttempts": 5, "initialBackoffSeconds": 5},
        )
        (tmp_path / "contract.json").write_text(json.dumps(doc))
        code = cli.main(["--contract", str(tmp_path / "contract.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "url: POST https://" in err and "set tls.caSecretRef" in err
    assert receiver.requests == []  # the handshake failed: nothing reached the handler
