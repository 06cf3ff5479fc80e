"""The network guard (issue 17, "URL schemes and SSRF"): the contract's
`network.deniedCidrs` (controller setting DENIED_CIDRS) is enforced by the runner after DNS
resolution, for every stack it connects through, and a denied address is exit 2 naming the
host, the address and the setting.

Real: the runner in-process (contract file -> exit code and summary), the http storage
backend (requests), the KServe v2 REST client (http.client), the gRPC channel, botocore
against moto's S3 server, SQLAlchemy, the resolver of this machine (`localhost`), and
stdlib HTTP servers on 127.0.0.1 and 127.0.0.2 recording what they get. Faked: storage or
the model where noted (the memory backend, FakeModel). No traffic leaves loopback: a
denied address is refused before any connection is made.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeModel, contract
from http_stub import KServeStub, Receiver, serve
from loopback_servers import ok, serve_at
from memory_backend import MemoryBackend, MemoryStore

from contracts.model import ModelEndpoint
from contracts.storage import HttpStorage, S3Storage, SqlStorage
from runners import cli, registry
from runners.api import InputRecord, RunContext
from runners.models.kserve import KServeV2Client
from runners.models.triton_grpc import open_channel
from runners.netguard import Guard, NetworkDenied
from runners.storage.http import HttpBackend
from runners.storage.s3 import S3Backend
from runners.storage.sql import SqlBackend

METADATA = ["169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32"]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TERMINATION_MESSAGE_PATH", str(tmp_path / "termination-log"))
    monkeypatch.delenv("JOB_NAME", raising=False)
    return tmp_path


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    store = MemoryStore(inputs=[{"x": float(i)} for i in range(4)])
    registry.storage_backends.register("memory", lambda: MemoryBackend(store))
    yield store
    registry.storage_backends.unregister("memory")


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    model = FakeModel()
    registry.model_protocols.register("kserve-v2", model.factory)
    yield model
    registry.model_protocols.unregister("kserve-v2")


def run(env: Path, doc: dict[str, Any], denied: list[str]) -> tuple[int, dict[str, Any]]:
    path = env / "contract.json"
    path.write_text(json.dumps({**doc, "network": {"deniedCidrs": denied}}))
    code = cli.main(["--contract", str(path)])
    return code, json.loads((env / "termination-log").read_text())


def ctx(*denied: str) -> RunContext:
    return RunContext("uid-1", "job-1", {}, "/nonexistent", denied_cidrs=denied)


@pytest.mark.usefixtures("fake_model", "store")
def test_http_storage_never_connects_to_a_denied_address(env: Path) -> None:
    with serve_at("127.0.0.2", ok([{"x": 1.0}])) as (url, seen):
        doc = contract(input={"http": {"url": f"{url}/records"}})
        code, summary = run(env, doc, ["127.0.0.2/32"])
    assert code == 2, summary
    assert seen.requests == []
    reason = summary["reason"]
    assert "connection to 127.0.0.2 refused: 127.0.0.2 is in 127.0.0.2/32" in reason
    assert "DENIED_CIDRS (chart runner.deniedCIDRs)" in reason


@pytest.mark.usefixtures("fake_model", "store")
def test_a_host_name_is_checked_by_the_addresses_it_resolves_to(env: Path) -> None:
    with serve_at("127.0.0.1", ok([{"x": 1.0}])) as (url, seen):
        port = url.rsplit(":", 1)[1]
        doc = contract(input={"http": {"url": f"http://localhost:{port}/records"}})
        code, summary = run(env, doc, ["127.0.0.0/8", "::1/128"])
    assert code == 2 and seen.requests == []
    assert "connection to localhost refused: it resolves to " in summary["reason"]


@pytest.mark.usefixtures("store")
def test_model_client_never_connects_to_a_denied_address(env: Path) -> None:
    with serve_at("127.0.0.2", ok({})) as (url, seen):
        model = {"protocol": "kserve-v2", "url": url, "name": "m"}
        code, summary = run(env, contract(model=model), ["127.0.0.2/32"])
    assert code == 2 and seen.requests == []
    assert "127.0.0.2 is in 127.0.0.2/32" in summary["reason"]


@pytest.mark.usefixtures("store")
def test_loopback_and_other_networks_stay_reachable_with_a_deny_list(env: Path) -> None:
    stub = KServeStub()
    with serve_at("127.0.0.1", ok([{"x": 1.0}, {"x": 2.0}])) as (url, _), serve(stub) as model_url:
        model = {"protocol": "kserve-v2", "url": model_url, "name": "m", "binaryData": False}
        doc = contract(input={"http": {"url": f"{url}/records"}}, model=model)
        code, summary = run(env, doc, METADATA)
    assert code == 0, summary
    assert summary["recordsWritten"] == 2 and stub.calls >= 1


def test_grpc_channel_is_not_opened_to_a_denied_address() -> None:
    endpoint = ModelEndpoint(protocol="triton-grpc", url="grpc://127.0.0.2:8001", name="m")
    with pytest.raises(NetworkDenied, match=r"127\.0\.0\.2 is in 127\.0\.0\.0/24"):
        open_channel(endpoint, ctx("127.0.0.0/24"))


def test_s3_requests_to_a_denied_address_are_refused(
    moto_endpoint: str, s3_bucket: str, aws_credentials: None
) -> None:
    settings = S3Storage.model_validate(
        {"bucket": s3_bucket, "key": "in.jsonl", "endpointUrl": moto_endpoint}
    )
    source = S3Backend().open_source(settings, ctx("127.0.0.1/32"))
    with pytest.raises(NetworkDenied, match=r"127\.0\.0\.1 is in 127\.0\.0\.1/32"):
        list(source.records(0))
    source.close()


def test_s3_keeps_working_when_its_address_is_not_denied(
    moto_endpoint: str, s3_bucket: str, aws_credentials: None
) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.put_object(Bucket=s3_bucket, Key="in.jsonl", Body=b'{"x": 1}\n')
    client.close()
    settings = S3Storage.model_validate(
        {"bucket": s3_bucket, "key": "in.jsonl", "endpointUrl": moto_endpoint}
    )
    source = S3Backend().open_source(settings, ctx(*METADATA))
    assert [r.data for r in source.records(0)] == [{"x": 1}]
    source.close()


def test_sql_connections_to_a_denied_address_are_refused() -> None:
    settings = SqlStorage.model_validate(
        {"url": "postgresql+psycopg://app@localhost:5432/test", "table": "t"}
    )
    with pytest.raises(NetworkDenied, match="connection to localhost refused: it resolves to"):
        SqlBackend().open_source(settings, ctx("127.0.0.0/8", "::1/128"))


def test_sqlite_is_not_a_network_connection(tmp_path: Path) -> None:
    settings = SqlStorage.model_validate(
        {"url": f"sqlite:///{tmp_path / 'in.db'}", "query": "SELECT 1 AS x"}
    )
    source = SqlBackend().open_source(settings, ctx("127.0.0.0/8"))
    assert [r.data for r in source.records(0)] == [{"x": 1}]
    source.close()


@pytest.mark.parametrize(
    ("address", "denied"),
    [
        ("169.254.169.254", "169.254.0.0/16"),
        ("::ffff:169.254.169.254", "169.254.0.0/16"),  # IPv4-mapped
        ("64:ff9b::a9fe:a9fe", "169.254.0.0/16"),  # NAT64
        ("2002:a9fe:a9fe::1", "169.254.0.0/16"),  # 6to4
        ("fe80::a9fe:a9fe%eth0", "fe80::/10"),  # with a scope id
        ("0.0.0.0", "127.0.0.0/8"),  # connects to this host
        ("::", "::1/128"),
    ],
)
def test_addresses_that_reach_a_denied_network_another_way_are_denied(
    address: str, denied: str
) -> None:
    assert str(Guard.of(ctx(denied)).denied_by(address)) == denied


def test_without_a_deny_list_nothing_is_checked() -> None:
    guard = Guard.of(ctx())
    assert not guard.is_active and guard.denied_by("169.254.169.254") is None


@pytest.mark.usefixtures("fake_model", "store")
def test_a_contract_with_a_bad_cidr_is_refused_naming_the_field(env: Path) -> None:
    code, summary = run(env, contract(), ["169.254.0.0/33"])
    assert code == 2
    assert summary["reason"].startswith("contract network.deniedCidrs.0: '169.254.0.0/33'")


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_tls_still_verifies_the_host_name_when_the_guard_picks_the_address(
    tmp_path: Path, server_certificate: tuple[Path, Path], host: str
) -> None:
    """The guard connects to the address it checked; the certificate is still checked
    against the host of the URL (requests and http.client alike)."""
    (tmp_path / "ca").mkdir()
    (tmp_path / "ca" / "ca.crt").write_text(server_certificate[0].read_text())
    guarded = RunContext("uid-1", "job-1", {}, str(tmp_path), denied_cidrs=tuple(METADATA))
    tls = {"caSecretRef": {"name": "ca", "key": "ca.crt"}}
    receiver = Receiver([{"x": 1.0}])
    stub = KServeStub()
    with serve(receiver, tls=server_certificate) as url, serve(stub, tls=server_certificate) as m:
        url, m = (u.replace("127.0.0.1", host) for u in (url, m))
        settings = HttpStorage.model_validate(
            {"url": f"{url}/in", "tls": tls, "recordsPath": "data.items"}
        )
        source = HttpBackend().open_source(settings, guarded)
        assert [r.data for r in source.records(0)] == [{"x": 1.0}]
        source.close()
        endpoint = ModelEndpoint.model_validate(
            {"protocol": "kserve-v2", "url": m, "name": "m", "binaryData": False, "tls": tls}
        )
        client = KServeV2Client(endpoint, guarded)
        assert [o.value for o in client.predict([InputRecord(0, "0", {"x": 1.0})])] == [2.0]
        client.close()
