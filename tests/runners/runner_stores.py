"""Helpers for tests that use real stores: reachability, CI rule, table cleanup, S3 clients.

Kept out of conftest.py so test modules can import them by a unique name
(several conftest.py files exist under tests/runners).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

POSTGRES_URLS = (
    "postgresql+psycopg://postgres@127.0.0.1:5432/test",
    "postgresql+psycopg://root@127.0.0.1:5432/test",
)
MARIADB_URLS = ("mysql+pymysql://root@127.0.0.1:3306/test",)


def is_ci() -> bool:
    """True when env CI asks for every real dependency to be present."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip the test (fail it under CI) because a real dependency is missing."""
    if is_ci():
        pytest.fail(f"{reason} (CI is set: real dependencies are required)")
    pytest.skip(reason)


def first_reachable(urls: tuple[str, ...]) -> str | None:
    """The first SQLAlchemy URL that accepts a connection, else None."""
    import sqlalchemy as sa

    for url in urls:
        engine = sa.create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
            return url
        except Exception:
            continue
        finally:
            engine.dispose()
    return None


def drop_tables(url: str, prefix: str) -> None:
    """Drop every table whose name starts with `prefix`."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            meta = sa.MetaData()
            meta.reflect(conn, only=lambda name, _meta: name.startswith(prefix))
            meta.drop_all(conn)
    finally:
        engine.dispose()


def s3_client(endpoint: str) -> Any:
    """A boto3 client on the moto server (caller closes it)."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
