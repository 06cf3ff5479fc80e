"""Backend behaviour beyond the shared contract: wire shapes, pagination, secrets, errors.

Real: the backends, a stdlib HTTP server on 127.0.0.1 (standing in for a JSON
API), moto's S3 server, SQLite files, Secret files laid out as the controller
mounts them. Faked: nothing inside the backends. Krateo's backend has its own
module (test_krateo_storage.py), TLS its own (test_storage_tls.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from http_stub import Receiver, serve
from runner_stores import s3_client

from contracts.storage import FileStorage, HttpStorage, S3Storage, SqlStorage
from runners.api import ConfigError, OutputRecord, RunContext, TransientError
from runners.storage.file import FileBackend
from runners.storage.http import HttpBackend
from runners.storage.owners import Owner
from runners.storage.s3 import S3Backend
from runners.storage.sql import SqlBackend


def ctx(secrets: Path | None = None, **parameters: str) -> RunContext:
    return RunContext("uid-9", "job-9-123", parameters, str(secrets or "/nonexistent"))


def secret(root: Path, name: str, key: str, value: str) -> None:
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / key).write_text(value)


def test_http_sink_posts_chunk_with_ids_and_idempotency_key(tmp_path: Path) -> None:
    receiver = Receiver()
    secret(tmp_path, "api", "key", "k-123")
    settings = HttpStorage.model_validate(
        {
            "url": "http://x",
            "auth": {"secretRef": {"name": "api", "key": "key"}, "header": "X-API-Key"},
        }
    )
    with serve(receiver) as url:
        sink = HttpBackend().open_sink(
            settings.model_copy(update={"url": url + "/r"}), ctx(tmp_path), role="output"
        )
        sink.write_chunk(4, [OutputRecord("a", 4000, {"x": 1}, 2)])
        sink.close()
    method, path, body, headers = receiver.requests[0]
    assert (method, path) == ("POST", "/r")
    assert headers["Idempotency-Key"] == "uid-9-job-9-123-4"
    assert headers["X-API-Key"] == "k-123"
    assert body["jobId"] == "uid-9" and body["jobName"] == "job-9-123" and body["chunk"] == 4
    assert body["records"] == [{"id": "a", "position": 4000, "input": {"x": 1}, "prediction": 2}]


def _paged(handler_pages: dict[str, Any]) -> Any:
    def handler(
        method: str, path: str, query: dict[str, list[str]], body: Any, headers: Any
    ) -> Any:
        key = query.get("page", query.get("cursor", [path]))[0]
        return (
            200,
            handler_pages.get(key, {}).get("headers", {}),
            handler_pages.get(key, {}).get("body", []),
        )

    return handler


@pytest.mark.parametrize(
    ("mode", "pages"),
    [
        ("page", {"1": {"body": {"items": [1, 2]}}, "2": {"body": {"items": [3]}}}),
        (
            "cursor",
            {
                "/in": {"body": {"items": [1, 2], "next": "c2"}},
                "c2": {"body": {"items": [3], "next": None}},
            },
        ),
    ],
)
def test_http_source_follows_pagination(mode: str, pages: dict[str, Any]) -> None:
    with serve(_paged(pages)) as url:
        settings = HttpStorage.model_validate(
            {
                "url": url + "/in",
                "recordsPath": "items",
                "pagination": {"mode": mode, "pageSize": 2, "cursorPath": "next"},
            }
        )
        source = HttpBackend().open_source(settings, ctx())
        got = [(r.position, r.data["value"]) for r in source.records(0)]
        source.close()
    assert got == [(0, 1), (1, 2), (2, 3)]


def test_http_link_pagination_follows_link_header() -> None:
    pages: dict[str, Any] = {}
    with serve(_paged(pages)) as url:
        pages["/a"] = {"body": [{"v": 1}], "headers": {"Link": f'<{url}/b>; rel="next"'}}
        pages["/b"] = {"body": [{"v": 2}]}
        settings = HttpStorage.model_validate({"url": url + "/a", "pagination": {"mode": "link"}})
        source = HttpBackend().open_source(settings, ctx())
        got = [r.data["v"] for r in source.records(0)]
        source.close()
    assert got == [1, 2]


def test_http_errors_map_to_transient_and_config_errors() -> None:
    def handler(method: str, path: str, *rest: Any) -> Any:
        return (503, {"Retry-After": "4"}, None) if path == "/busy" else (404, {}, {"error": "no"})

    with serve(handler) as url:
        busy = HttpBackend().open_sink(HttpStorage(url=url + "/busy"), ctx(), role="output")
        gone = HttpBackend().open_sink(HttpStorage(url=url + "/gone"), ctx(), role="output")
        with pytest.raises(TransientError) as transient:
            busy.write_chunk(0, [])
        with pytest.raises(ConfigError, match="HTTP 404"):
            gone.write_chunk(0, [])
        busy.close()
        gone.close()
    assert transient.value.retry_after == 4.0


def test_s3_reads_csv_prefix_in_key_order_with_secret_credentials(
    tmp_path: Path, moto_endpoint: str, s3_bucket: str
) -> None:
    client = s3_client(moto_endpoint)
    client.put_object(Bucket=s3_bucket, Key="in/b.csv", Body=b"k,v\nb1,3\n")
    client.put_object(Bucket=s3_bucket, Key="in/a.csv", Body=b'k,v\na1,1\na2,"two\nlines"\n')
    client.close()
    secret(tmp_path, "s3creds", "AWS_ACCESS_KEY_ID", "x")
    secret(tmp_path, "s3creds", "AWS_SECRET_ACCESS_KEY", "y")
    settings = S3Storage.model_validate(
        {
            "bucket": s3_bucket,
            "prefix": "in/",
            "endpointUrl": moto_endpoint,
            "forcePathStyle": True,
            "idField": "k",
            "credentialsSecretRef": {"name": "s3creds"},
        }
    )
    source = S3Backend().open_source(settings, ctx(tmp_path))
    got = [(r.position, r.id, r.data["v"]) for r in source.records(1)]
    source.close()
    assert got == [(1, "a2", "two\nlines"), (2, "b1", "3")]


def test_sql_query_binds_run_parameters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, color TEXT)"))
        conn.execute(sa.text("INSERT INTO t VALUES (1, 'red'), (2, 'blue'), (3, 'red')"))
    engine.dispose()
    settings = SqlStorage(
        url=url, query="SELECT id, color FROM t WHERE color = :color ORDER BY id", id_field="id"
    )
    source = SqlBackend().open_source(settings, ctx(color="red"))
    got = [(r.position, r.id) for r in source.records(0)]
    source.close()
    assert got == [(0, "1"), (1, "3")]


def _sqlite_table(tmp_path: Path, ddl: str, rows: str) -> str:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE t ({ddl})"))
        conn.execute(sa.text(f"INSERT INTO t VALUES {rows}"))
    engine.dispose()
    return url


def _ids(settings: SqlStorage) -> list[tuple[int, str]]:
    source = SqlBackend().open_source(settings, ctx())
    try:
        return [(r.position, r.id) for r in source.records(0)]
    finally:
        source.close()


def test_sql_table_ids_default_to_its_single_column_primary_key(tmp_path: Path) -> None:
    url = _sqlite_table(tmp_path, "code TEXT PRIMARY KEY, v INT", "('b', 2), ('a', 1), ('c', 3)")
    assert _ids(SqlStorage(url=url, table="t")) == [(0, "a"), (1, "b"), (2, "c")]
    assert _ids(SqlStorage(url=url, table="t", id_field="v")) == [(0, "1"), (1, "2"), (2, "3")]


@pytest.mark.parametrize(
    ("ddl", "source"),
    [
        ("code TEXT, v INT, PRIMARY KEY (code, v)", {"table": "t"}),  # composite key
        ("code TEXT PRIMARY KEY, v INT", {"table": "t", "columns": ["v"]}),  # key not read
        ("code TEXT PRIMARY KEY, v INT", {"query": "SELECT * FROM t ORDER BY code"}),
    ],
    ids=["composite-key", "key-not-read", "query"],
)
def test_sql_ids_default_to_positions_without_a_single_key_column(
    tmp_path: Path, ddl: str, source: dict[str, Any]
) -> None:
    url = _sqlite_table(tmp_path, ddl, "('b', 2), ('a', 1)")
    assert _ids(SqlStorage.model_validate({"url": url, **source})) == [(0, "0"), (1, "1")]


def test_sql_missing_table_and_unbound_parameter_are_config_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'e.db'}"
    with pytest.raises(ConfigError, match="table: table 'nope' does not exist"):
        SqlBackend().open_source(SqlStorage(url=url, table="nope"), ctx())
    source = SqlBackend().open_source(SqlStorage(url=url, query="SELECT :missing"), ctx())
    with pytest.raises(ConfigError, match="query: no run parameter for :missing"):
        list(source.records(0))
    source.close()


def test_sql_url_from_secret(tmp_path: Path) -> None:
    secret(tmp_path, "db", "url", f"sqlite:///{tmp_path / 's.db'}")
    settings = SqlStorage.model_validate(
        {"urlSecretRef": {"name": "db", "key": "url"}, "table": "out"}
    )
    sink = SqlBackend().open_sink(settings, ctx(tmp_path), role="output")
    sink.write_chunk(0, [OutputRecord("a", 0, {}, [1, 2])])
    assert sink.committed() == {0}
    sink.close()


def test_file_directory_input_is_read_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "2.jsonl").write_text('{"n": 3}\n')
    (tmp_path / "in" / "1.jsonl").write_text('{"n": 1}\n\n{"n": 2}\n')
    (tmp_path / "in" / "_SUCCESS").write_text("{}")
    source = FileBackend().open_source(FileStorage(path=str(tmp_path / "in")), ctx())
    assert [(r.position, r.data["n"]) for r in source.records(1)] == [(1, 2), (2, 3)]


def test_file_output_csv_has_one_row_per_record(tmp_path: Path) -> None:
    settings = FileStorage(path=str(tmp_path / "out"), format="csv")
    sink = FileBackend().open_sink(settings, ctx(), role="output")
    sink.write_chunk(0, [OutputRecord("a", 0, {"x": 1}, {"p": 0.5})])
    text = (tmp_path / "out" / "part-000000.csv").read_text()
    assert text == 'id,position,input,prediction\na,0,"{""x"":1}","{""p"":0.5}"\n'
    assert json.loads(json.dumps(sink.location)) == str(tmp_path / "out")


def test_s3_counts_records_of_chunks_written_without_a_count(
    moto_endpoint: str, s3_bucket: str
) -> None:
    client = s3_client(moto_endpoint)
    client.put_object(Bucket=s3_bucket, Key="o/part-000000.jsonl", Body=b'{"id": "a"}\n' * 3)
    client.put_object(Bucket=s3_bucket, Key="o/_RUN", Body=Owner.of(ctx(), "output").to_json())
    client.close()
    settings = S3Storage(
        bucket=s3_bucket, prefix="o", endpoint_url=moto_endpoint, force_path_style=True
    )
    sink = S3Backend().open_sink(settings, ctx(), role="output")
    sink.write_chunk(1, [OutputRecord("b", 1, {}, 1)])
    assert sink.committed_records({0, 1}) == 4
    sink.close()


def test_s3_chunk_already_holding_other_records_is_refused(
    moto_endpoint: str, s3_bucket: str
) -> None:
    settings = S3Storage(
        bucket=s3_bucket, prefix="o", endpoint_url=moto_endpoint, force_path_style=True
    )
    sink = S3Backend().open_sink(settings, ctx(), role="output")
    sink.write_chunk(0, [OutputRecord("a", 0, {}, 1)])
    sink.write_chunk(0, [OutputRecord("a", 0, {}, 1)])  # 412, verified: same records
    with pytest.raises(ConfigError, match="exists with other records"):
        sink.write_chunk(0, [OutputRecord("b", 0, {}, 1)])
    sink.close()
