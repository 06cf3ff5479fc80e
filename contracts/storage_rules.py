"""Direction rules of storage blocks: what `input` may set, and what `output`/`errors` may.

A `StorageSpec` is the same model in every direction, but some of its settings only make
sense one way (a SQL query is read, never written; S3 output needs a prefix, one object per
chunk). These rules live apart from the models in contracts/storage.py because they are
not part of a storage kind's shape: contracts/config.py attaches them per field, as Python
checks (`check_input`, `check_output`) and as their CEL twins for the CRD.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contracts.storage import StorageSpec


# The CEL twins of check_input/check_output, for the CRD (the format rules have none: the
# controller reports them on the config, as it does every rule Python alone checks).
INPUT_RULES = (
    "!has(self.sql) || has(self.sql.table) != has(self.sql.query)",
    "sql: set exactly one of table and query",
    "!has(self.s3) || has(self.s3.key) != has(self.s3.prefix)",
    "s3: set exactly one of key and prefix",
)
OUTPUT_RULES = (
    "!has(self.sql) || (has(self.sql.table) && !has(self.sql.query))",
    "sql: output needs `table` and takes no `query`",
    "!has(self.s3) || (has(self.s3.prefix) && !has(self.s3.key))",
    "s3: output needs `prefix` (one object per chunk) and takes no `key`",
    "!has(self.http) || !has(self.http.pagination)",
    "http: pagination applies to input only",
    " && ".join(f"(!has(self.{k}) || !has(self.{k}.recordField))" for k in ("file", "s3", "sql")),
    "recordField applies to input only (it reads back an earlier run's error output)",
)


def check_input(storage: StorageSpec) -> StorageSpec:
    """Direction-specific rules for `storage.input`."""
    sql, s3 = storage.sql, storage.s3
    if sql is not None and (sql.table is None) == (sql.query is None):
        raise ValueError("sql: set exactly one of table and query")
    if s3 is not None and (s3.key is None) == (s3.prefix is None):
        raise ValueError("s3: set exactly one of key and prefix")
    body = storage.body()
    if getattr(body, "format", None) == "openai-batch" and getattr(body, "id_field", None):
        raise ValueError(
            f"{storage.kind}: idField does not apply to format openai-batch (each request's "
            "custom_id is its id); leave it out"
        )
    return storage


def check_output(storage: StorageSpec) -> StorageSpec:
    """Direction-specific rules for `storage.output` and `storage.errors`."""
    sql, s3, http = storage.sql, storage.s3, storage.http
    if sql is not None and (sql.table is None or sql.query is not None):
        raise ValueError("sql: output needs `table` and takes no `query`")
    if s3 is not None and (s3.prefix is None or s3.key is not None):
        raise ValueError("s3: output needs `prefix` (one object per chunk) and takes no `key`")
    if http is not None and http.pagination is not None:
        raise ValueError("http: pagination applies to input only")
    if sql is not None and sql.format is not None:
        raise ValueError(
            "sql: format applies to input only (an output table holds each request's "
            "response under `prediction`)"
        )
    if getattr(storage.body(), "record_field", None) is not None:
        raise ValueError(
            f"{storage.kind}: recordField applies to input only "
            "(it reads back an earlier run's error output)"
        )
    return storage
