"""Fixtures for the runner tests: real stores, skipped (or failed in CI) when absent.

Real: SQLite files, local files, moto's S3 server in a thread on 127.0.0.1, the
PostgreSQL (127.0.0.1:5432, trust auth, database `test`) and MariaDB
(127.0.0.1:3306, root, no password, database `test`) servers of the machine
(`postgres_url`, `mariadb_url`, `moto_endpoint` live in tests/conftest.py, shared
with the end-to-end suite), and a TLS certificate made by the `openssl` CLI. Each
test gets uniquely named tables and drops them afterwards.

When a database is unreachable the test is skipped with the reason, except
when env CI is set (to anything but empty, "0" or "false"): then it fails, so
CI cannot go green by silently testing less. The helpers behind these fixtures
(reachability, the CI rule, table cleanup) live in runner_stores.py so test
modules can import them by a unique name.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from http_stub import make_certificate  # noqa: E402


@pytest.fixture
def table_name() -> Iterator[str]:
    """A unique table name; tables starting with it are dropped by `drop_tables`."""
    yield f"t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake AWS credentials, so nothing can reach a real account."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def s3_bucket(moto_endpoint: str, aws_credentials: None) -> Iterator[str]:
    """A fresh bucket on the moto server (created inside the fixture)."""
    import boto3

    name = f"b-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    client.close()
    yield name


@pytest.fixture(scope="session")
def server_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(cert, key) made with the real `openssl` CLI; the certificate is its own CA."""
    return make_certificate(tmp_path_factory.mktemp("tls"))
