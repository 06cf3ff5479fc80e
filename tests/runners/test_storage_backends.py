"""Every storage backend against the shared contract suite (storage_contract.py).

Real: the in-memory reference backend, local files (JSONL, CSV and Parquet), SQLite
files, the local PostgreSQL and MariaDB servers (unique tables, dropped after),
moto's S3 server on 127.0.0.1 (JSONL and Parquet objects), pyarrow writing the
Parquet inputs and reading the parts back, and a stdlib HTTP server on 127.0.0.1 that
de-duplicates chunks like the docs require of HTTP receivers (also standing in
for Krateo's finops-database-handler). Faked: nothing inside the backends.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from http_stub import Receiver, serve
from memory_backend import MemoryBackend, MemoryStore
from runner_stores import drop_tables, s3_client
from storage_contract import CTX, StorageContract, rows_by_chunk

from contracts.storage import FileStorage, HttpStorage, KrateoStorage, S3Storage, SqlStorage
from runners.api import RunContext, Sink, Source
from runners.chunkcodec import ChunkCodec
from runners.storage.file import FileBackend
from runners.storage.http import HttpBackend
from runners.storage.krateo import KrateoBackend
from runners.storage.s3 import S3Backend
from runners.storage.sql import SqlBackend


class MemoryHarness:
    discovers_commits = True
    has_manifest = True
    other_run = "refused"

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.backend = MemoryBackend(self.store)

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink:
        return self.backend.open_sink({"name": role}, ctx, role=role)

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]:
        return dict(self.store.chunks.get(role, {}))

    def manifest(self, role: str = "output") -> dict[str, Any] | None:
        return self.store.manifests.get(role)

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source:
        self.store.inputs, self.store.id_field = records, id_field
        return self.backend.open_source({}, CTX)


def parquet_bytes(records: list[dict[str, Any]]) -> bytes:
    """`records` as a Parquet file with row groups of 3 rows (resuming skips some)."""
    out = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(records), out, row_group_size=3)
    return bytes(out.getvalue().to_pybytes())


class FileHarness:
    discovers_commits = True
    has_manifest = True
    other_run = "refused"
    feeds_pipeline = True
    keeps_nan = False

    def __init__(self, root: Path, fmt: str) -> None:
        self.root, self.fmt = root, fmt
        self.keeps_nan = fmt == "parquet"

    def elsewhere(self) -> FileHarness:
        return FileHarness(self.root / "elsewhere", self.fmt)

    def error_source(self) -> Source:
        settings = FileStorage(path=str(self.root / "errors"), record_field="input")
        return FileBackend().open_source(settings, CTX)

    def _settings(self, role: str) -> FileStorage:
        return FileStorage(path=str(self.root / role), format=self.fmt)  # type: ignore[arg-type]

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink:
        return FileBackend().open_sink(self._settings(role), ctx, role=role)

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]:
        found = {}
        for path in sorted((self.root / role).glob(f"part-*.{self.fmt}")):
            found[int(path.name[5:11])] = ChunkCodec(self.fmt).decode(path.read_bytes())
        return found

    def manifest(self, role: str = "output") -> dict[str, Any] | None:
        path = self.root / role / "_SUCCESS"
        return json.loads(path.read_text()) if path.exists() else None

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source:
        path = self.root / f"input.{self.fmt}"
        if self.fmt == "parquet":
            path.write_bytes(parquet_bytes(records))
        elif self.fmt == "csv":
            lines = [",".join(records[0]), *(",".join(str(v) for v in r.values()) for r in records)]
            path.write_text("".join(line + "\n" for line in lines))
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return FileBackend().open_source(FileStorage(path=str(path), id_field=id_field), CTX)


class SqlHarness:
    discovers_commits = True
    has_manifest = True
    other_run = "beside"

    def __init__(self, url: str, table: str) -> None:
        self.url, self.table = url, table

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink:
        return SqlBackend().open_sink(
            SqlStorage(url=self.url, table=f"{self.table}_{role}"), ctx, role=role
        )

    def _query(self, sql: str) -> list[dict[str, Any]]:
        engine = sa.create_engine(self.url)
        try:
            with engine.connect() as conn:
                if not sa.inspect(conn).has_table(sql.split()[-1]):
                    return []
                return [dict(r._mapping) for r in conn.execute(sa.text(sql))]
        finally:
            engine.dispose()

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]:
        rows = self._query(f"SELECT * FROM {self.table}_{role}")
        mine = (r for r in rows if (r["run_uid"], r["job_name"]) == (CTX.run_uid, CTX.job_name))
        return rows_by_chunk(iter({**r, "id": r["record_id"]} for r in mine))

    def manifest(self, role: str = "output") -> dict[str, Any] | None:
        rows = self._query(f"SELECT * FROM {self.table}_{role}_chunks")
        found = [r["manifest"] for r in rows if r["chunk"] == -1 and r["run_uid"] == CTX.run_uid]
        return json.loads(found[0]) if found else None

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source:
        engine = sa.create_engine(self.url)
        meta = sa.MetaData()
        columns = [
            sa.Column(k, sa.String(64) if isinstance(v, str) else sa.Integer)
            for k, v in records[0].items()
        ]
        # A primary key gives the table a stable order when there is no id field, and is
        # then the default id: pk = position, so those ids are the positions the suite expects.
        pk = sa.Column("pk", sa.Integer, primary_key=True, autoincrement=False)
        table = sa.Table(f"{self.table}_in", meta, pk, *columns)
        try:
            meta.create_all(engine)
            with engine.begin() as conn:
                conn.execute(sa.insert(table), [{"pk": i, **r} for i, r in enumerate(records)])
        finally:
            engine.dispose()
        settings = SqlStorage(url=self.url, table=table.name, id_field=id_field)
        return SqlBackend().open_source(settings, CTX)


class S3Harness:
    discovers_commits = True
    has_manifest = True
    other_run = "refused"
    feeds_pipeline = True

    def __init__(self, endpoint: str, bucket: str, fmt: str = "jsonl", base: str = "out") -> None:
        self.endpoint, self.bucket, self.fmt, self.base = endpoint, bucket, fmt, base
        self.keeps_nan = fmt == "parquet"

    def elsewhere(self) -> S3Harness:
        return S3Harness(self.endpoint, self.bucket, self.fmt, base="elsewhere")

    def error_source(self) -> Source:
        settings = self._settings(prefix=f"{self.base}/errors/", record_field="input")
        return S3Backend().open_source(settings, CTX)

    def _settings(self, **extra: Any) -> S3Storage:
        return S3Storage(
            bucket=self.bucket, endpoint_url=self.endpoint, force_path_style=True, **extra
        )

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink:
        settings = self._settings(prefix=f"{self.base}/{role}", format=self.fmt)
        return S3Backend().open_sink(settings, ctx, role=role)

    def _get(self, key: str) -> bytes | None:
        client = s3_client(self.endpoint)
        try:
            return client.get_object(Bucket=self.bucket, Key=key)["Body"].read()  # type: ignore[no-any-return]
        except client.exceptions.NoSuchKey:
            return None
        finally:
            client.close()

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]:
        client = s3_client(self.endpoint)
        try:
            listed = client.list_objects_v2(Bucket=self.bucket, Prefix=f"{self.base}/{role}/part-")
            keys = [item["Key"] for item in listed.get("Contents", [])]
        finally:
            client.close()
        return {
            int(k.rsplit("-", 1)[1][:6]): ChunkCodec(self.fmt).decode(self._get(k) or b"")
            for k in keys
        }

    def manifest(self, role: str = "output") -> dict[str, Any] | None:
        body = self._get(f"{self.base}/{role}/_SUCCESS")
        return json.loads(body) if body else None

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source:
        client = s3_client(self.endpoint)
        half = len(records) // 2
        for i, part in enumerate((records[:half], records[half:])):
            if self.fmt == "parquet":
                body = parquet_bytes(part)
            else:
                body = "".join(json.dumps(r) + "\n" for r in part).encode()
            client.put_object(Bucket=self.bucket, Key=f"in/part-{i}.{self.fmt}", Body=body)
        client.close()
        return S3Backend().open_source(self._settings(prefix="in/", id_field=id_field), CTX)


class HttpHarness:
    """An HTTP receiver that answers which chunks it holds (`committedUrl`), or one that
    cannot (`resumes=False`: a restarted pod sends every chunk again)."""

    has_manifest = False
    other_run = "beside"

    def __init__(self, url: str, receiver: Receiver, *, resumes: bool = True) -> None:
        self.url, self.receiver = url, receiver
        self.discovers_commits = resumes

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink:
        committed = {"committedUrl": f"{self.url}/committed"} if self.discovers_commits else {}
        settings = HttpStorage.model_validate({"url": f"{self.url}/out", **committed})
        return HttpBackend().open_sink(settings, ctx, role=role)

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]:
        return {
            key[2]: body["records"]
            for key, body in self.receiver.chunks.items()
            if key[3] == role and isinstance(key[2], int) and key[:2] == (CTX.run_uid, CTX.job_name)
        }

    def manifest(self, role: str = "output") -> dict[str, Any] | None:
        return None

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source:
        self.receiver.records, self.receiver.page_size = records, 3
        settings = HttpStorage.model_validate(
            {
                "url": f"{self.url}/in",
                "recordsPath": "data.items",
                "idField": id_field,
                "pagination": {"mode": "offset", "pageSize": 3, "sizeParam": "limit"},
            }
        )
        return HttpBackend().open_source(settings, CTX)


class KrateoHarness(HttpHarness):
    """Krateo's finops-database-handler: a notebook per role, and one answering which chunks
    the others hold (`committedPath`), unless `resumes=False`."""

    def __init__(
        self, url: str, receiver: Receiver, secrets: Path, *, resumes: bool = True
    ) -> None:
        super().__init__(url, receiver, resumes=resumes)
        endpoint = secrets / "finops-endpoint"
        endpoint.mkdir(parents=True, exist_ok=True)
        (endpoint / "server-url").write_text(url)
        (endpoint / "token").write_text("s3cr3t")
        self.secrets = str(secrets)

    def _settings(self, path: str) -> KrateoStorage:
        committed = {"committedPath": "/compute/committed"} if self.discovers_commits else {}
        return KrateoStorage.model_validate(
            {
                "api": {
                    "endpointRef": {"name": "finops-endpoint", "namespace": "elsewhere"},
                    "path": path,
                },
                **committed,
            }
        )

    def sink(self, role: str = "output", ctx: RunContext = CTX) -> Sink:
        ctx = dataclasses.replace(ctx, secrets_dir=self.secrets)
        return KrateoBackend().open_sink(self._settings(f"/compute/{role}"), ctx, role=role)

    def read(self, role: str = "output") -> dict[int, list[dict[str, Any]]]:
        # Krateo bodies hold strings only: the rows are JSON-encoded (runners/storage/krateo.py).
        found = {}
        for (uid, job, chunk, _), body in self.receiver.chunks.items():
            if (uid, job) != (CTX.run_uid, CTX.job_name):
                continue
            if role == "errors" and "errors" in body:
                found[int(chunk)] = json.loads(body["errors"])
            elif role != "errors" and "predictions" in body:
                pairs = zip(json.loads(body["ids"]), json.loads(body["predictions"]), strict=True)
                found[int(chunk)] = [{"id": i, "prediction": p} for i, p in pairs]
        return found

    def source(self, records: list[dict[str, Any]], id_field: str | None) -> Source | None:
        if id_field is not None:
            return None
        self.receiver.records = records
        ctx = dataclasses.replace(CTX, secrets_dir=self.secrets)
        return KrateoBackend().open_source(self._settings("/compute/input"), ctx)


class TestMemoryBackend(StorageContract):
    @pytest.fixture
    def harness(self) -> MemoryHarness:
        return MemoryHarness()


class TestFileBackendJsonl(StorageContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> FileHarness:
        return FileHarness(tmp_path, "jsonl")


class TestFileBackendCsv(StorageContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> FileHarness:
        return FileHarness(tmp_path, "csv")


class TestFileBackendParquet(StorageContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> FileHarness:
        return FileHarness(tmp_path, "parquet")


class TestSqliteBackend(StorageContract):
    @pytest.fixture
    def harness(self, tmp_path: Path, table_name: str) -> SqlHarness:
        return SqlHarness(f"sqlite:///{tmp_path / 'db.sqlite'}", table_name)


@pytest.mark.requires_service
class TestPostgresBackend(StorageContract):
    @pytest.fixture
    def harness(self, postgres_url: str, table_name: str) -> Iterator[SqlHarness]:
        yield SqlHarness(postgres_url, table_name)
        drop_tables(postgres_url, table_name)


@pytest.mark.requires_service
class TestMariadbBackend(StorageContract):
    @pytest.fixture
    def harness(self, mariadb_url: str, table_name: str) -> Iterator[SqlHarness]:
        yield SqlHarness(mariadb_url, table_name)
        drop_tables(mariadb_url, table_name)


class TestS3Backend(StorageContract):
    @pytest.fixture
    def harness(self, moto_endpoint: str, s3_bucket: str) -> S3Harness:
        return S3Harness(moto_endpoint, s3_bucket)


class TestS3BackendParquet(StorageContract):
    @pytest.fixture
    def harness(self, moto_endpoint: str, s3_bucket: str) -> S3Harness:
        return S3Harness(moto_endpoint, s3_bucket, "parquet")


class TestHttpBackend(StorageContract):
    @pytest.fixture
    def harness(self) -> Iterator[HttpHarness]:
        receiver = Receiver()
        with serve(receiver) as url:
            yield HttpHarness(url, receiver)


class TestHttpBackendWithoutResume(StorageContract):
    @pytest.fixture
    def harness(self) -> Iterator[HttpHarness]:
        receiver = Receiver()
        with serve(receiver) as url:
            yield HttpHarness(url, receiver, resumes=False)


class TestKrateoBackend(StorageContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[KrateoHarness]:
        receiver = Receiver()
        with serve(receiver) as url:
            yield KrateoHarness(url, receiver, tmp_path / "secrets")


class TestKrateoBackendWithoutResume(StorageContract):
    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[KrateoHarness]:
        receiver = Receiver()
        with serve(receiver) as url:
            yield KrateoHarness(url, receiver, tmp_path / "secrets", resumes=False)


def test_file_source_total_counts_every_position_records_yields(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n\n   \n{"x": 2}\nnot json\n[1]\n{"x": 3}')
    (tmp_path / "b.csv").write_text('x,note\n1,"two\nlines"\n\n2,ok\n3\n4,ok\n')
    (tmp_path / "_SUCCESS").write_text("{}")  # not data: skipped by both
    source = FileBackend().open_source(FileStorage(path=str(tmp_path)), CTX)
    positions = [record.position for record in source.records(0)]
    assert positions == list(range(9))  # 5 JSONL positions (2 unreadable), 4 CSV (1 ragged)
    assert source.total() == 9
