"""Storage blocks: where a run reads its records and where it writes results.

On the wire a storage block is a one-key map, `{<kind>: {...}}`, as in Krateo's
CRDs. Built-in kinds (http, krateo, s3, sql, file) are validated by their own
model, and so is an installed plug-in's kind (contracts/plugins.py); any other
kind passes through untouched so custom runners can define their own (Krateo's
`testdata-custom.yaml` relies on that). `StorageSpec`'s fields are the table of
built-in kinds: each names its settings model, which names the runner backend;
the CRD, the contract schema and the runner's registry all read them there.
The rules that depend on a block's direction (input or output) are in
contracts/storage_rules.py, re-exported here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from contracts.auth import KeyAuth
from contracts.base import HttpUrl, ObjectName, Schema, SecretKeyRef, SecretReference, cel
from contracts.model import TlsOptions
from contracts.plugins import StorageSettings, plugin_settings
from contracts.storage_fields import (
    FORMAT_DOC,
    ID_FIELD_DOC,
    SQL_FORMAT_DOC,
    FieldName,
    Format,
    include_input_setting,
    record_field_setting,
)
from contracts.storage_rules import INPUT_RULES as INPUT_RULES
from contracts.storage_rules import OUTPUT_RULES as OUTPUT_RULES
from contracts.storage_rules import check_errors as check_errors
from contracts.storage_rules import check_input as check_input
from contracts.storage_rules import check_output as check_output

Path = Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class HttpPagination(Schema):
    """How to fetch further pages of an HTTP input."""

    mode: Literal["page", "offset", "cursor", "link"] = Field(
        description=(
            "page: increment `pageParam`; offset: increment `offsetParam` by the page size; "
            "cursor: send the value found at `cursorPath` as `cursorParam`; "
            "link: follow the URL found at `nextPath` (or the Link header)."
        )
    )
    page_size: int = Field(default=1000, ge=1, le=1_000_000, description="Records per page.")
    size_param: FieldName | None = Field(
        default=None, description="Query parameter carrying the page size, e.g. limit."
    )
    page_param: FieldName = Field(default="page", description="Query parameter for page mode.")
    offset_param: FieldName = Field(
        default="offset", description="Query parameter for offset mode."
    )
    cursor_param: FieldName = Field(
        default="cursor", description="Query parameter for cursor mode."
    )
    cursor_path: FieldName | None = Field(
        default=None,
        description="Dotted path of the next cursor in the response (cursor mode).",
    )
    next_path: FieldName | None = Field(
        default=None,
        description="Dotted path of the next page URL in the response (link mode).",
    )


class HttpStorage(StorageSettings):
    """Any JSON HTTP API."""

    backend = "runners.storage.http:HttpBackend"

    url: HttpUrl = Field(description="Endpoint URL (http:// or https://), without credentials.")
    method: Literal["GET", "POST", "PUT", "PATCH"] | None = Field(
        default=None,
        description="HTTP method. Default: GET for input, POST for output.",
    )
    headers: dict[str, Annotated[str, StringConstraints(max_length=8192)]] = Field(
        default_factory=dict, max_length=64, description="Extra request headers."
    )
    body: dict[str, Any] | None = Field(
        default=None,
        description="JSON body sent with input requests (run parameters are merged in).",
    )
    records_path: FieldName | None = Field(
        default=None,
        description="Dotted path of the record list in an input response, e.g. data.items.",
    )
    pagination: HttpPagination | None = Field(
        default=None, description="Input pagination; default: a single request."
    )
    id_field: FieldName | None = Field(default=None, description=ID_FIELD_DOC)
    auth: KeyAuth | None = Field(default=None, description="API-key authentication.")
    tls: TlsOptions | None = Field(default=None, description="TLS options.")
    timeout_seconds: float = Field(
        default=60, gt=0, le=3600, description="Timeout of one request, in seconds."
    )
    committed_url: HttpUrl | None = Field(
        default=None,
        description=(
            "Output only: where the runner asks which chunks the receiver holds, so that a "
            "restarted pod resumes after them: GET with query parameters jobId, jobName and role, "
            'answered with {"chunks": [{"chunk": 0, "records": 1000}, ...]}. Without it a '
            "restarted pod sends every chunk again, and the receiver must de-duplicate."
        ),
    )


class EndpointRef(SecretReference):
    """A Krateo Endpoint: a Secret with `server-url` and optional `token` (and TLS keys)."""

    name: ObjectName = Field(description="Name of the endpoint Secret.")
    namespace: ObjectName | None = Field(
        default=None,
        description=(
            "Namespace of the endpoint Secret. longrun only reads Secrets in the run's own "
            "namespace: leave empty or set it to the run's namespace."
        ),
    )

    def secret_namespace(self) -> str | None:
        """The namespace the reference names, or None for the run's own."""
        return self.namespace


class KrateoApi(Schema):
    """Krateo's `api` block: a call to an endpoint such as the finops-database-handler."""

    endpoint_ref: EndpointRef = Field(description="Secret describing the endpoint.")
    path: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description="Request path appended to the endpoint's server URL."
    )
    verb: Literal["GET", "POST", "PUT", "PATCH"] = Field(default="POST", description="HTTP method.")
    headers: list[Annotated[str, StringConstraints(max_length=8192)]] = Field(
        default_factory=list,
        max_length=64,
        description="Headers as 'Name: value' strings.",
    )
    payload: Annotated[str, StringConstraints(max_length=65536)] | None = Field(
        default=None,
        description="Raw request body; default: the run parameters as JSON.",
    )


class KrateoStorage(StorageSettings):
    """Krateo's storage shape, so Krateo kserve-controller configs work unchanged."""

    backend = "runners.storage.krateo:KrateoBackend"

    api: KrateoApi = Field(description="The API call that reads or writes the data.")
    committed_path: Annotated[str, StringConstraints(min_length=1, max_length=2048)] | None = Field(
        default=None,
        description=(
            "Output only: a path of the same endpoint (e.g. a notebook) that answers which "
            "chunks it holds, so that a restarted pod resumes after them. It gets the run "
            "parameters with job_uid, job_name and role, and answers "
            '{"result": [{"chunk": 0, "records": 1000}, ...]} (or that list as JSON text). '
            "Without it a restarted pod sends every chunk again."
        ),
    )


class S3Credentials(SecretReference):
    """Which keys of a Secret hold the S3 credentials."""

    access_key_id_key: FieldName = Field(
        default="AWS_ACCESS_KEY_ID", description="Secret key holding the access key id."
    )
    secret_access_key_key: FieldName = Field(
        default="AWS_SECRET_ACCESS_KEY",
        description="Secret key holding the secret access key.",
    )
    session_token_key: FieldName | None = Field(
        default=None, description="Secret key holding a session token, if any."
    )


class S3Storage(StorageSettings):
    """Objects in S3 or an S3-compatible store (MinIO, Ceph, ...)."""

    backend = "runners.storage.s3:S3Backend"

    bucket: Annotated[str, StringConstraints(min_length=3, max_length=63)] = Field(
        description="Bucket name."
    )
    key: Path | None = Field(
        default=None, description="Input: one object to read. Not used for output."
    )
    prefix: Path | None = Field(
        default=None,
        description=(
            "Input: read every object under this prefix, in key order. Output: write one object "
            "per committed chunk under this prefix (required for output)."
        ),
    )
    format: Format | None = Field(
        default=None,
        description=f"{FORMAT_DOC} Default: from the key's extension, else jsonl.",
    )
    endpoint_url: HttpUrl | None = Field(
        default=None,
        description="Endpoint of an S3-compatible store (http(s)://, no user@); default: AWS.",
    )
    region: Annotated[str, StringConstraints(max_length=63)] | None = Field(
        default=None, description="Region name."
    )
    force_path_style: bool = Field(
        default=False,
        description="Use path-style addressing (most S3-compatible stores).",
    )
    credentials_secret_ref: S3Credentials | None = Field(
        default=None,
        description="Credentials; default: the pod's ambient identity (IRSA etc.).",
    )
    id_field: FieldName | None = Field(default=None, description=ID_FIELD_DOC)
    record_field: FieldName | None = record_field_setting()
    include_input: bool | None = include_input_setting()
    tls: TlsOptions | None = Field(default=None, description="TLS options.")


class SqlStorage(StorageSettings):
    """A table or query in a SQL database (SQLite, PostgreSQL, MariaDB/MySQL)."""

    backend = "runners.storage.sql:SqlBackend"

    model_config = ConfigDict(
        json_schema_extra=cel(
            "has(self.url) != has(self.urlSecretRef)",
            "set exactly one of url and urlSecretRef",
            # Same rule as _has_password: a password before the host never reaches etcd.
            "!has(self.url) || !self.url.matches('^[^:/]*://[^/@]*:[^/@]*@')",
            "url must not contain a password; put the URL in a Secret and use urlSecretRef",
        )
    )

    url: Annotated[str, StringConstraints(min_length=1, max_length=2048)] | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL without a password, e.g. sqlite:////data/in.db. A URL with "
            "credentials belongs in a Secret: use urlSecretRef."
        ),
    )
    url_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding the full SQLAlchemy URL."
    )
    table: Annotated[str, StringConstraints(min_length=1, max_length=253)] | None = Field(
        default=None,
        description="Input: table to read. Output: table to write (created if absent).",
    )
    query: Annotated[str, StringConstraints(min_length=1, max_length=65536)] | None = Field(
        default=None,
        description="Input only: a SELECT; run parameters are bound as :name placeholders.",
    )
    id_field: FieldName | None = Field(default=None, description=ID_FIELD_DOC)
    record_field: FieldName | None = record_field_setting()
    columns: list[FieldName] | None = Field(
        default=None,
        max_length=4096,
        description="Input: columns to read; default: all.",
    )
    format: Literal["openai-batch"] | None = Field(default=None, description=SQL_FORMAT_DOC)

    @model_validator(mode="after")
    def _check_url(self) -> SqlStorage:
        if (self.url is None) == (self.url_secret_ref is None):
            raise ValueError("set exactly one of url and urlSecretRef")
        if self.url is not None and _has_password(self.url):
            raise ValueError(
                "url must not contain a password; put the URL in a Secret and use urlSecretRef"
            )
        return self


def _has_password(url: str) -> bool:
    netloc = url.split("://", 1)[-1].split("/", 1)[0]
    return "@" in netloc and ":" in netloc.split("@", 1)[0]


class FileStorage(StorageSettings):
    """CSV, JSONL or Parquet files on a volume mounted into the runner pod."""

    backend = "runners.storage.file:FileBackend"

    path: Path = Field(
        description=(
            "Input: a file, or a directory whose files are read in name order. Output: a directory "
            "that receives one file per committed chunk."
        )
    )
    format: Format | None = Field(
        default=None,
        description=f"{FORMAT_DOC} Default: from the extension, else jsonl.",
    )
    id_field: FieldName | None = Field(default=None, description=ID_FIELD_DOC)
    record_field: FieldName | None = record_field_setting()
    include_input: bool | None = include_input_setting()
    volume: ObjectName | None = Field(
        default=None,
        description=(
            "Name of a PersistentVolumeClaim (in the run's namespace) that the controller mounts "
            "into the runner pod at `mountPath`, so that `path` exists there."
        ),
    )
    mount_path: Annotated[str, StringConstraints(pattern=r"^/.*", max_length=4096)] | None = Field(
        default=None,
        description=(
            "Where `volume` is mounted. Default: the first directory of `path` "
            "(/data for /data/in.jsonl)."
        ),
    )

    def volume_mount_path(self) -> str | None:
        """Where `volume` is mounted in the pod (None without a volume)."""
        if self.volume is None:
            return None
        if self.mount_path is not None:
            return self.mount_path
        return "/" + self.path.strip("/").split("/", 1)[0]

    @model_validator(mode="after")
    def _volume_needs_absolute_path(self) -> FileStorage:
        if self.volume is None:
            return self
        if not self.path.startswith("/"):
            raise ValueError(f"path: {self.path!r} must be absolute when volume is set")
        mount = (self.volume_mount_path() or "").rstrip("/")
        if not self.path.startswith(mount + "/"):
            raise ValueError(f"path: {self.path!r} is not below mountPath {mount!r}")
        return self


class StorageSpec(Schema):
    """A one-key map `{<kind>: {...}}`: a built-in kind, or any other kind passed through."""

    # extra="allow": other kinds are kept, validated by a plug-in's model when one is installed,
    # else verbatim for custom runners.
    model_config = ConfigDict(
        extra="allow", json_schema_extra={"minProperties": 1, "maxProperties": 1}
    )

    http: HttpStorage | None = Field(default=None, description="Any JSON HTTP API.")
    krateo: KrateoStorage | None = Field(default=None, description="Krateo's api/endpointRef.")
    s3: S3Storage | None = Field(default=None, description="S3 or an S3-compatible store.")
    sql: SqlStorage | None = Field(default=None, description="A SQL table or query.")
    file: FileStorage | None = Field(
        default=None, description="CSV, JSONL or Parquet files on a volume."
    )

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> StorageSpec:
        kinds = self.kinds()
        if len(kinds) != 1:
            found = ", ".join(kinds) if kinds else "none"
            raise ValueError(f"set exactly one storage kind (found: {found})")
        for kind, body in (self.model_extra or {}).items():
            # A model: a plug-in's settings, validated already (after-validators also see
            # instances passed on to another model's field).
            if not isinstance(body, dict | StorageSettings):
                raise ValueError(f"storage kind {kind!r} must be an object")
        return self

    @model_validator(mode="after")
    def _validate_plugin_kind(self) -> StorageSpec:
        extra = self.model_extra or {}
        for kind, body in extra.items():
            settings = plugin_settings(kind, body) if isinstance(body, dict) else None
            if settings is not None:
                extra[kind] = settings
        return self

    def kinds(self) -> list[str]:
        """The storage kinds set in this block (valid blocks have exactly one)."""
        builtin = [k for k in BUILTIN_KINDS if getattr(self, k) is not None]
        return builtin + list(self.model_extra or {})

    @property
    def kind(self) -> str:
        """The storage kind, e.g. `sql` or a custom runner's own kind."""
        return self.kinds()[0]

    def body(self) -> Schema | dict[str, Any]:
        """The kind's settings: a validated model (built-in or plug-in), else the raw map."""
        value = getattr(self, self.kind, None)
        if isinstance(value, Schema):
            return value
        return dict((self.model_extra or {})[self.kind])


# kind -> settings model of every built-in kind, read from StorageSpec's fields (`X | None`).
BUILTIN_KINDS: dict[str, type[StorageSettings]] = {
    kind: get_args(info.annotation)[0] for kind, info in StorageSpec.model_fields.items()
}
