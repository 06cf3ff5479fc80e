"""`s3`: CSV, JSONL or Parquet objects in S3 or an S3-compatible store (MinIO, Ceph, moto).

Input is one `key` or every object under a `prefix` in key order, streamed line
by line from the response body (never loaded whole); a Parquet object is read by
row group with ranged GETs (runners/parquet.py). Output is one object per
chunk, `<prefix>/part-<index:06d>.<ext>`, plus `<prefix>/_SUCCESS` at the end.

An S3 PUT is atomic: readers see the old object, or the whole new one. For the
output role the PUT is conditional (`IfNoneMatch: *`): a 412 means a previous
attempt already committed this chunk, which we verify by reading it back (same
records, in order) before treating it as done. Stores that ignore the header
simply overwrite with the same bytes, which is just as idempotent. The error
role overwrites unconditionally: a stale error chunk from a killed attempt must
be replaced (see runners/pipeline.py).

Each chunk object carries its record count as user metadata (`x-amz-meta-records`),
so a restarted pod learns how many records the committed chunks hold with one
HEAD per chunk instead of reading them (objects written without it are read).

A prefix belongs to one run and Job: the first sink claims it with a `_RUN`
object, PUT with `IfNoneMatch: *` and read back (runners/storage/owners.py);
another run's sink is refused, so every part object a sink lists is its own
run's. A store that ignores the condition lets the last PUT win: two runs
starting in the same instant could each read its own marker back before the
other's PUT lands, and such a store offers nothing to keep them apart.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from contracts.storage import S3Storage
from contracts.storage_fields import PARQUET
from runners.api import (
    ConfigError,
    ErrorRecord,
    InputRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
    TransientError,
)
from runners.chunkcodec import ChunkCodec
from runners.formats import guess_format, iter_text_lines
from runners.netguard import Guard, guard_boto_client
from runners.reading import read_part
from runners.secrets import read_secret
from runners.storage.owners import MARKER, Owner, refusal
from runners.tls import verify

MANIFEST = "_SUCCESS"
_READ_CHUNK = 1 << 16
_RECORDS_META = "records"

if TYPE_CHECKING:
    from runners import parquet


class S3Backend(StorageBackend):
    """StorageBackend for kind `s3`."""

    def open_source(self, settings: S3Storage, ctx: RunContext) -> S3Source:
        """A source over one object or a prefix of objects."""
        return S3Source(settings, ctx)

    def open_sink(self, settings: S3Storage, ctx: RunContext, *, role: str) -> S3Sink:
        """A sink writing one object per chunk under the prefix."""
        return S3Sink(settings, ctx, role=role)

    def error_settings(self, settings: S3Storage) -> S3Storage:
        """Default error output: the sibling prefix `<prefix>-errors`."""
        prefix = (settings.prefix or "").rstrip("/")
        return settings.model_copy(update={"prefix": f"{prefix}-errors"})


def make_client(settings: S3Storage, ctx: RunContext) -> Any:
    """A boto3 S3 client for the settings (endpoint, region, path style, credentials, TLS)."""
    kwargs: dict[str, Any] = {
        "endpoint_url": settings.endpoint_url,
        "region_name": settings.region,
        "config": Config(
            s3={"addressing_style": "path" if settings.force_path_style else "auto"},
            retries={"max_attempts": 3, "mode": "standard"},
        ),
    }
    creds = settings.credentials_secret_ref
    if creds is not None:
        field = "credentialsSecretRef"
        kwargs["aws_access_key_id"] = read_secret(
            ctx, name=creds.name, key=creds.access_key_id_key, field=field
        )
        kwargs["aws_secret_access_key"] = read_secret(
            ctx, name=creds.name, key=creds.secret_access_key_key, field=field
        )
        if creds.session_token_key:
            kwargs["aws_session_token"] = read_secret(
                ctx, name=creds.name, key=creds.session_token_key, field=field
            )
    kwargs["verify"] = _verify(settings, ctx)
    client = boto3.session.Session().client("s3", **kwargs)
    guard_boto_client(client, Guard.of(ctx))  # every request's host (runners/netguard.py)
    return client


def _verify(settings: S3Storage, ctx: RunContext) -> bool | str | None:
    # None rather than True when nothing is set: botocore then still honours AWS_CA_BUNDLE.
    found = verify(settings.tls, ctx, field="tls.caSecretRef")
    return None if found is True else found


def _error(exc: Exception, *, what: str, field: str) -> Exception:
    """Map a botocore error: throttling/5xx/connection -> TransientError, else ConfigError."""
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        code = exc.response.get("Error", {}).get("Code", "")
        if status == 429 or status >= 500 or code in ("SlowDown", "Throttling"):
            return TransientError(f"{what}: {code or status}")
        return ConfigError(f"{field}: {what}: {code} {exc.response['Error'].get('Message', '')}")
    if isinstance(exc, BotoConnectionError | BotoCoreError):
        return TransientError(f"{what}: {exc}")
    return exc


class S3Source(Source):
    """Records of one object or of every object under a prefix, in key order."""

    def __init__(self, settings: S3Storage, ctx: RunContext) -> None:
        self.settings = settings
        self.client = make_client(settings, ctx)

    def _keys(self) -> Iterator[str]:
        if self.settings.key is not None:
            yield self.settings.key
            return
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            pages = paginator.paginate(Bucket=self.settings.bucket, Prefix=self.settings.prefix)
            for page in pages:  # S3 lists keys in UTF-8 binary order: stable
                for item in page.get("Contents", []):
                    name = item["Key"].rsplit("/", 1)[-1]
                    if not name.startswith(("_", ".")) and not item["Key"].endswith("/"):
                        yield item["Key"]
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc, what=f"listing s3://{self.settings.bucket}", field="prefix") from exc

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        """Records with position >= skip; positions continue across objects."""
        start = 0
        for key in self._keys():
            start += yield from read_part(
                key,
                guess_format(key, self.settings.format),
                lines=self._lines,
                binary=self._object,
                where=f"key: s3://{self.settings.bucket}/{key}",
                start=start,
                skip=skip,
                id_field=self.settings.id_field,
                record_field=self.settings.record_field,
            )

    def _lines(self, key: str) -> Iterator[str]:
        where = f"s3://{self.settings.bucket}/{key}"
        try:
            body = self.client.get_object(Bucket=self.settings.bucket, Key=key)["Body"]
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc, what=f"reading {where}", field="key") from exc
        try:
            yield from iter_text_lines(body.iter_chunks(_READ_CHUNK))
        except (BotoCoreError, OSError) as exc:
            raise TransientError(f"reading {where}: {exc}") from exc
        finally:
            body.close()

    def _object(self, key: str) -> parquet.RangeFile:
        """A seekable view of the object, read with ranged GETs (runners/parquet.py)."""
        where = f"s3://{self.settings.bucket}/{key}"

        def fetch(first: int, last: int) -> bytes:
            try:
                obj = self.client.get_object(
                    Bucket=self.settings.bucket, Key=key, Range=f"bytes={first}-{last}"
                )
                with obj["Body"] as body:
                    return bytes(body.read())
            except (ClientError, BotoCoreError) as exc:
                raise _error(exc, what=f"reading {where}", field="key") from exc

        try:
            head = self.client.head_object(Bucket=self.settings.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc, what=f"reading {where}", field="key") from exc
        from runners import parquet

        return parquet.RangeFile(int(head["ContentLength"]), fetch)

    def total(self) -> int | None:
        """The rows of Parquet objects, from their footers; unknown for other formats
        without reading the objects."""
        keys = list(self._keys())
        if any(guess_format(key, self.settings.format) != PARQUET for key in keys):
            return None
        where = f"s3://{self.settings.bucket}/"
        from runners import parquet

        return sum(parquet.count_rows(self._object(k), where=f"{where}{k}") for k in keys)

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()


class S3Sink(Sink):
    """One object per chunk under `prefix`."""

    counts_committed = True  # its chunk objects say what it holds

    def __init__(self, settings: S3Storage, ctx: RunContext, *, role: str) -> None:
        self.bucket = settings.bucket
        self.prefix = ctx.execution_subpath(settings.prefix or "").rstrip("/")
        self.codec = ChunkCodec.of(settings, ctx, role=role)
        self.ext = self.codec.extension
        self.ctx = ctx
        self.role = role
        self.client = make_client(settings, ctx)
        self.location = f"s3://{self.bucket}/{self.prefix}/"
        try:
            self._claim(Owner.of(ctx, role))
        except BaseException:
            self.client.close()
            raise

    def _claim(self, mine: Owner) -> None:
        """Make the prefix this run's, or refuse it (runners/storage/owners.py)."""
        key = f"{self.prefix}/{MARKER}"
        marker = self._get(key)
        if marker is None:
            free, earlier = self._earlier_owner()
            if not free and earlier != mine:
                raise refusal(self.location, earlier, field="prefix")
            self._put(key, mine.to_json(), IfNoneMatch="*")
            marker = self._get(key) or b""  # read back: the condition may have been ignored
        holder = Owner.from_json(marker)
        if holder != mine:
            raise refusal(self.location, holder, field="prefix")

    def _earlier_owner(self) -> tuple[bool, Owner | None]:
        """(free, owner) of a prefix without a marker: an older longrun's output names its run
        in `_SUCCESS`; part objects without one belong to nobody known."""
        manifest = self._get(f"{self.prefix}/{MANIFEST}")
        if manifest is not None:
            return False, Owner.from_json(manifest)
        try:
            listed = self.client.list_objects_v2(
                Bucket=self.bucket, Prefix=f"{self.prefix}/part-", MaxKeys=1
            )
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc, what=f"listing {self.location}", field="prefix") from exc
        return not listed.get("Contents"), None

    def _get(self, key: str) -> bytes | None:
        """An object's bytes, None when it does not exist."""
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
            with obj["Body"] as body:
                return bytes(body.read())
        except ClientError as exc:
            if _status(exc) == 404:
                return None
            raise _error(exc, what=f"reading s3://{self.bucket}/{key}", field="prefix") from exc
        except BotoCoreError as exc:
            raise _error(exc, what=f"reading s3://{self.bucket}/{key}", field="prefix") from exc

    def _put(self, key: str, body: bytes, **extra: Any) -> None:
        """PUT an object; a 412 (it exists, `IfNoneMatch`) is left to the caller to read."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **extra)
        except ClientError as exc:
            if _status(exc) != 412:
                raise _error(exc, what=f"writing {key}", field="prefix") from exc
        except BotoCoreError as exc:
            raise _error(exc, what=f"writing {key}", field="prefix") from exc

    def key(self, index: int) -> str:
        """The object key of chunk `index`."""
        return f"{self.prefix}/part-{index:06d}.{self.ext}"

    def committed(self) -> set[int]:
        """Chunks whose object exists."""
        found: set[int] = set()
        paginator = self.client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}/part-"):
                for item in page.get("Contents", []):
                    digits = item["Key"][len(self.prefix) + 6 : -len(self.ext) - 1]
                    if digits.isdigit() and item["Key"].endswith(f".{self.ext}"):
                        found.add(int(digits))
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc, what=f"listing {self.location}", field="prefix") from exc
        return found

    def committed_records(self, chunks: set[int]) -> int:
        """Records in the chunk objects of `chunks` (absent ones hold 0)."""
        return sum(self._records_in(index) for index in sorted(chunks & self.committed()))

    def _records_in(self, index: int) -> int:
        key = self.key(index)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
            count = str(head.get("Metadata", {}).get(_RECORDS_META, ""))
            if count.isdigit():
                return int(count)
            obj = self.client.get_object(Bucket=self.bucket, Key=key)  # written before metadata
            with obj["Body"] as body:
                return self.codec.count(body.read())
        except (ClientError, BotoCoreError) as exc:
            raise _error(exc, what=f"reading s3://{self.bucket}/{key}", field="prefix") from exc

    def committed_usage(self, chunks: set[int]) -> dict[str, int]:
        """Token counts of the usage in the chunk objects of `chunks` (one GET each)."""
        tokens: dict[str, int] = {}
        for index in sorted(chunks & self.committed()):
            key = self.key(index)
            try:
                with self.client.get_object(Bucket=self.bucket, Key=key)["Body"] as body:
                    found = self.codec.usage(body.read())
            except (ClientError, BotoCoreError) as exc:
                where = f"reading s3://{self.bucket}/{key}"
                raise _error(exc, what=where, field="prefix") from exc
            for name, value in found.items():
                tokens[name] = tokens.get(name, 0) + value
        return tokens

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """PUT chunk `index` (conditionally for the output role), its record count as metadata."""
        body = self.codec.encode(records)
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if self.role == "output" else {}
        extra["Metadata"] = {_RECORDS_META: str(len(records))}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key(index), Body=body, **extra)
        except ClientError as exc:
            if _status(exc) == 412:
                self._verify_existing(index, records)
                return
            raise _error(exc, what=f"writing {self.key(index)}", field="prefix") from exc
        except BotoCoreError as exc:
            raise _error(exc, what=f"writing {self.key(index)}", field="prefix") from exc

    def _verify_existing(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        obj = self.client.get_object(Bucket=self.bucket, Key=self.key(index))
        with obj["Body"] as body:
            rows = self.codec.decode(body.read())
        if [str(r["id"]) for r in rows] != [r.id for r in records]:
            raise ConfigError(
                f"prefix: s3://{self.bucket}/{self.key(index)} exists with other records: "
                "another run writes to this prefix, or the input changed since the chunk "
                "was committed (ids must be the same on every read)"
            )

    def finish(self, summary: Mapping[str, Any]) -> None:
        """PUT the `_SUCCESS` manifest."""
        manifest = {
            "runUid": self.ctx.run_uid,
            "jobName": self.ctx.job_name,
            "role": self.role,
            "format": self.codec.fmt,
            **summary,
        }
        body = json.dumps(manifest, sort_keys=True).encode()
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{MANIFEST}", Body=body)

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
