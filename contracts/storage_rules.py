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
    if getattr(body, "include_input", None) is not None:
        raise ValueError(
            f"{storage.kind}: includeInput applies to output only (which columns a Parquet "
            "output part carries); leave it out of the input"
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
    body = storage.body()
    if getattr(body, "include_input", None) is not None and getattr(body, "format", None) != (
        "parquet"
    ):
        raise ValueError(
            f"{storage.kind}: includeInput applies to format parquet only (JSONL and CSV rows "
            "always carry the input); set format: parquet or leave includeInput out"
        )
    return storage


def check_errors(storage: StorageSpec) -> StorageSpec:
    """Direction-specific rules for `storage.errors`: those of an output, and the error
    output always carries the input (so failed records can be re-run)."""
    check_output(storage)
    if getattr(storage.body(), "include_input", None) is False:
        raise ValueError(
            f"{storage.kind}: includeInput: false does not apply to the error output (its rows "
            "always carry the input, so failed records can be re-run); leave it out"
        )
    return storage


def sharing_problem(output: StorageSpec, errors: StorageSpec | None, *, pods: int) -> str | None:
    """Why a run shared by `pods` pods cannot write to these outputs, or None.

    Each pod commits its own chunks, and the one that finds every chunk of the run committed
    completes the output and counts its failures (runners/shards.py): both outputs must say
    which chunks they hold. file, s3 and sql always can; http needs `committedUrl`, krateo
    `committedPath`, and a krateo output's default error output (the pod log) cannot.
    """
    why = f"{pods} pods share the run, and the pod that finds every chunk committed completes it"
    if output.kind == "krateo" and errors is None:
        return (
            f"errors: a krateo output sends failed records to the pod log, which cannot say "
            f"which chunks it holds; {why}: give the run an errors storage (krateo with "
            "committedPath, or file, s3, sql)"
        )
    for where, spec in (("output", output), ("errors", errors or output)):
        body = spec.body()
        need = {"http": "committed_url", "krateo": "committed_path"}.get(spec.kind)
        if need is not None and getattr(body, need, None) is None:
            name = "committedUrl" if spec.kind == "http" else "committedPath"
            return f"{where}.{spec.kind}.{name}: required when {why}, as it asks the receiver"
    return None
