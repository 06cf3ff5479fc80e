"""The file stores: one contract suite, run on the directory store and on S3 (moto's server).

Real: the directory store on the test's directory; the S3 store with boto3 against moto's S3
server (a thread, tests/conftest.py), fake credentials. Faked: nothing else. Each store must
keep an upload invisible until its metadata is written, remove an aborted one, read part
files as one file in name order, and sweep what a killed server left behind.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from batchapi.s3store import PART_BYTES, S3Store
from batchapi.store import STALE_SECONDS, DirectoryStore, FileMeta, count_lines

NS = "team-a"
FILE = "file-" + "1" * 40


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "directory":
        yield DirectoryStore(tmp_path / "files")
        return
    endpoint = request.getfixturevalue("moto_endpoint")
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    bucket = f"batches-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
    yield S3Store(
        bucket=bucket,
        prefix="longrun",
        endpoint_url=endpoint,
        force_path_style=True,
        runner_secret="runner-s3",
    )


def write_parts(store: Any, location: str, parts: dict[str, bytes]) -> None:
    """What a runner leaves in an output location (part files, its markers)."""
    if isinstance(store, DirectoryStore):
        folder = store.root / location
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in parts.items():
            (folder / name).write_bytes(data)
        return
    for name, data in parts.items():
        store.client.put_object(Bucket=store.bucket, Key=f"{location}/{name}", Body=data)


def content(store: Any, meta: FileMeta) -> bytes:
    size, chunks = store.size_and_chunks(NS, meta)
    data = b"".join(chunks)
    assert len(data) == size
    return data


def test_an_upload_exists_only_once_its_metadata_is_written(store: Any) -> None:
    upload = store.begin(NS, FILE)
    upload.write(b'{"a": 1}\n')
    upload.write(b'{"a": 2}\n')
    upload.commit()
    assert store.list_ids(NS) == [] and store.get_meta(NS, FILE) is None
    meta = FileMeta(FILE, 18, 1, "in.jsonl", "batch", check={"requests": 2})
    store.put_meta(NS, meta)
    assert store.list_ids(NS) == [FILE]
    assert store.get_meta(NS, FILE) == meta
    assert content(store, meta) == b'{"a": 1}\n{"a": 2}\n'
    assert store.list_ids("team-b") == [] and store.get_meta("team-b", FILE) is None


def test_an_aborted_upload_leaves_nothing(store: Any) -> None:
    upload = store.begin(NS, FILE)
    upload.write(b"x" * (PART_BYTES + 10))  # one multipart part sent already on S3
    upload.abort()
    assert leftovers(store) == []


def test_a_large_upload_is_sent_in_parts_and_read_back_whole(store: Any) -> None:
    data = (b"0123456789abcdef" * 65536) * 9  # 9 MiB: two S3 parts
    upload = store.begin(NS, FILE)
    for start in range(0, len(data), 300_000):
        upload.write(data[start : start + 300_000])
    upload.commit()
    meta = FileMeta(FILE, len(data), 1, "big.jsonl", "batch")
    store.put_meta(NS, meta)
    assert content(store, meta) == data


def test_part_files_read_as_one_file_in_name_order(store: Any) -> None:
    location = store.location(NS, "batch_" + "2" * 32, "output")
    write_parts(
        store,
        location,
        {
            "part-000001.jsonl": b'{"n": 2}\n',
            "_SUCCESS": b"{}",
            "part-000000.jsonl": b'{"n": 1}\n',
            ".tmp-part-2": b"half",
            "_RUN": b"{}",
        },
    )
    assert store.count_parts(location) == (2, 18)
    meta = FileMeta("file-" + "3" * 40, 18, 1, "out.jsonl", "batch_output", parts=location)
    store.put_meta(NS, meta)
    assert content(store, meta) == b'{"n": 1}\n{"n": 2}\n'
    store.delete(NS, meta)
    assert store.count_parts(location) == (0, 0) and store.get_meta(NS, meta.id) is None


def test_a_deleted_file_is_gone_with_its_content(store: Any) -> None:
    upload = store.begin(NS, FILE)
    upload.write(b"{}\n")
    upload.commit()
    meta = FileMeta(FILE, 3, 1, "in.jsonl", "batch")
    store.put_meta(NS, meta)
    store.delete(NS, meta)
    assert store.list_ids(NS) == [] and leftovers(store) == []


def test_sweep_removes_what_a_killed_server_left_once_stale(store: Any) -> None:
    unfinished = store.begin(NS, FILE)  # killed mid-upload: never committed nor aborted
    unfinished.write(b"x" * (PART_BYTES + 1))
    if isinstance(store, DirectoryStore):
        unfinished.handle.close()  # the process that held it is gone
    orphan = store.begin(NS, "file-" + "4" * 40)  # killed before its metadata
    orphan.write(b"{}\n")
    orphan.commit()
    if isinstance(store, DirectoryStore):  # moto dates every multipart upload 2010-11-10
        assert store.sweep(now=time.time()) == 0  # not stale yet: maybe still being written
    store.sweep(now=time.time() + STALE_SECONDS + 60)
    assert leftovers(store) == []


def test_runner_blocks_name_the_uploaded_file_and_the_output_location(store: Any) -> None:
    location = store.location(NS, "batch_" + "2" * 32, "errors")
    read, written = store.runner_input(NS, FILE), store.runner_output(location)
    if isinstance(store, DirectoryStore):
        assert read == {
            "file": {
                "path": str(store.root / NS / "files" / f"{FILE}.jsonl"),
                "format": "openai-batch",
            }
        }
        assert written["file"]["path"] == str(store.root / location)
    else:
        assert read["s3"]["key"] == f"longrun/{NS}/files/{FILE}.jsonl"
        assert read["s3"]["credentialsSecretRef"] == {"name": "runner-s3"}
        assert written["s3"]["prefix"] == f"longrun/{NS}/batches/batch_{'2' * 32}/errors"
        assert written["s3"]["forcePathStyle"] is True


def test_a_claimed_directory_is_mounted_into_runner_pods(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "files", claim="batch-files")
    block = store.runner_input(NS, FILE)["file"]
    assert block["volume"] == "batch-files" and block["mountPath"] == str(store.root)


def test_line_counts_ignore_blank_lines_and_piece_boundaries() -> None:
    pieces = [b'{"a"', b': 1}\n\n{"b": 2}', b"\n", b"", b'{"c": 3}']
    assert count_lines(iter(pieces)) == (3, sum(map(len, pieces)))


def leftovers(store: Any) -> list[str]:
    """Whatever the store holds, uploads in progress included."""
    if isinstance(store, DirectoryStore):
        return [str(p) for p in store.root.rglob("*") if p.is_file()]
    client, bucket = store.client, store.bucket
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents") or []]
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads") or []
    return keys + [json.dumps(u["Key"]) for u in uploads]
