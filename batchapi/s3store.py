"""Files in an S3 bucket (AWS or any S3-compatible store), the store for clusters.

The same keys as the directory store (batchapi/store.py) under an optional prefix. An upload
is written as a multipart upload in parts of `PART_BYTES` (one `put_object` when it is
smaller), which S3 shows only once completed; the metadata object is written after it. An
upload cut short is aborted; one the server could not abort (it was killed) is invisible and
is aborted by `sweep` once stale (a bucket lifecycle rule, AbortIncompleteMultipartUpload,
does the same without the server).

The server's own credentials come from the environment (AWS_ACCESS_KEY_ID... or the pod's
identity), as boto3 finds them; runner pods read and write with the Secret named by
`runner_secret` in their own namespace (or their ambient identity when none is named).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from batchapi.store import (
    PART,
    STALE_SECONDS,
    FileMeta,
    Upload,
    content_key,
    count_lines,
    location_key,
    meta_key,
)

PART_BYTES = 8 * 1024 * 1024  # S3's multipart parts are at least 5 MiB (the last excepted)
READ_SIZE = 1024 * 1024


class S3Store:
    """Uploads and outputs in `bucket`, under `prefix`."""

    def __init__(
        self,
        *,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        force_path_style: bool = False,
        runner_secret: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.region = region
        self.force_path_style = force_path_style
        self.runner_secret = runner_secret
        self.client = client if client is not None else self._client()

    def _client(self) -> Any:
        import boto3  # only this store needs it
        from botocore.config import Config

        style = {"addressing_style": "path"} if self.force_path_style else {}
        config = Config(s3=style, retries={"max_attempts": 5, "mode": "standard"})
        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region, config=config
        )

    def check(self) -> None:
        """ValueError in one line when the bucket cannot be used (no credentials, no bucket)."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except (
            Exception
        ) as exc:  # botocore's ClientError, NoCredentialsError, EndpointConnectionError
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise ValueError(f"--s3-bucket {self.bucket}: {text}") from None

    def _key(self, key: str) -> str:
        return self.prefix + key

    def begin(self, namespace: str, file_id: str) -> Upload:
        return _S3Upload(self.client, self.bucket, self._key(content_key(namespace, file_id)))

    def put_meta(self, namespace: str, meta: FileMeta) -> None:
        body = json.dumps(meta.wire(), sort_keys=True).encode()
        key = self._key(meta_key(namespace, meta.id))
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body)

    def get_meta(self, namespace: str, file_id: str) -> FileMeta | None:
        key = self._key(meta_key(namespace, file_id))
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            return None
        return FileMeta.from_wire(json.loads(answer["Body"].read()))

    def list_ids(self, namespace: str) -> list[str]:
        folder = self._key(f"{namespace}/files/")
        keys = self._keys(folder)
        return [k[len(folder) : -len(".json")] for k, _ in keys if k.endswith(".json")]

    def delete(self, namespace: str, meta: FileMeta) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(meta_key(namespace, meta.id)))
        if meta.parts is None:
            key = self._key(content_key(namespace, meta.id))
            self.client.delete_object(Bucket=self.bucket, Key=key)
            return
        for key, _ in self._keys(meta.parts.rstrip("/") + "/"):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def size_and_chunks(self, namespace: str, meta: FileMeta) -> tuple[int, Iterator[bytes]]:
        if meta.parts is None:
            key = self._key(content_key(namespace, meta.id))
            head = self.client.head_object(Bucket=self.bucket, Key=key)
            objects = [(key, int(head["ContentLength"]))]
        else:
            objects = self._parts(meta.parts)
        return sum(size for _, size in objects), self._read(objects)

    def count_parts(self, location: str) -> tuple[int, int]:
        return count_lines(self._read(self._parts(location)))

    def runner_input(self, namespace: str, file_id: str) -> dict[str, Any]:
        key = self._key(content_key(namespace, file_id))
        return {"s3": {**self._block(), "key": key, "format": "openai-batch"}}

    def runner_output(self, location: str) -> dict[str, Any]:
        return {"s3": {**self._block(), "prefix": location, "format": "openai-batch"}}

    def location(self, namespace: str, batch_id: str, role: str) -> str:
        return self._key(location_key(namespace, batch_id, role))

    def _block(self) -> dict[str, Any]:
        block: dict[str, Any] = {"bucket": self.bucket}
        if self.endpoint_url:
            block["endpointUrl"] = self.endpoint_url
        if self.region:
            block["region"] = self.region
        if self.force_path_style:
            block["forcePathStyle"] = True
        if self.runner_secret:
            block["credentialsSecretRef"] = {"name": self.runner_secret}
        return block

    def sweep(self, *, now: float) -> int:
        removed = 0
        pages = self.client.get_paginator("list_multipart_uploads").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        for page in pages:
            for upload in page.get("Uploads") or []:
                started: datetime = upload["Initiated"]
                if now - started.astimezone(UTC).timestamp() > STALE_SECONDS:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    removed += 1
        return removed + self._sweep_orphans(now)

    def _sweep_orphans(self, now: float) -> int:
        """Content committed by a server killed before it wrote the metadata."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix
        )
        found = [o for page in pages for o in page.get("Contents") or []]
        metas = {o["Key"][: -len(".json")] for o in found if o["Key"].endswith(".json")}
        removed = 0
        for item in found:
            key, modified = item["Key"], item["LastModified"].astimezone(UTC).timestamp()
            if "/files/" not in key or not key.endswith(".jsonl"):
                continue
            if key[: -len(".jsonl")] not in metas and now - modified > STALE_SECONDS:
                self.client.delete_object(Bucket=self.bucket, Key=key)
                removed += 1
        return removed

    def _keys(self, prefix: str) -> list[tuple[str, int]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        return [(o["Key"], int(o["Size"])) for page in pages for o in page.get("Contents") or []]

    def _parts(self, location: str) -> list[tuple[str, int]]:
        folder = location.rstrip("/") + "/"
        found = [(k, s) for k, s in self._keys(folder) if PART.match(k[len(folder) :])]
        return sorted(found)

    def _read(self, objects: list[tuple[str, int]]) -> Iterator[bytes]:
        for key, size in objects:
            if size == 0:
                continue
            answer = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes=0-{size - 1}"
            )
            body = answer["Body"]
            try:
                while data := body.read(READ_SIZE):
                    yield data
            finally:
                body.close()


class _S3Upload:
    """Pieces gathered into parts of PART_BYTES; one put_object when the whole is smaller."""

    def __init__(self, client: Any, bucket: str, key: str) -> None:
        self.client, self.bucket, self.key = client, bucket, key
        self.buffer = bytearray()
        self.upload_id: str | None = None
        self.etags: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= PART_BYTES:
            self._send(bytes(self.buffer[:PART_BYTES]))
            del self.buffer[:PART_BYTES]

    def _send(self, part: bytes) -> None:
        if self.upload_id is None:
            started = self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key)
            self.upload_id = started["UploadId"]
        number = len(self.etags) + 1
        answer = self.client.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=part
        )
        self.etags.append({"ETag": answer["ETag"], "PartNumber": number})

    def commit(self) -> None:
        if self.upload_id is None:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self.buffer))
            return
        if self.buffer:
            self._send(bytes(self.buffer))
        self.client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self.etags},
        )

    def abort(self) -> None:
        self.buffer.clear()
        if self.upload_id is not None:
            self.client.abort_multipart_upload(
                Bucket=self.bucket, Key=self.key, UploadId=self.upload_id
            )
