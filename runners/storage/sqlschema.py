"""The tables of the `sql` output (runners/storage/sql.py): their layout, its check, the upsert.

The layout of the output and `<table>_chunks` tables, the check that an existing output table
is keyed as this one is, and the per-dialect INSERT ... ON CONFLICT that writes a chunk's rows
are schema, not streaming or error handling: they live here so sql.py reads as the source and
sink (and stays within the 400-line bar). See sql.py's docstring for why rows are keyed so.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from contracts.storage import SqlStorage
from runners.api import ConfigError


def split_name(name: str) -> tuple[str | None, str]:
    """(schema or None, table) of a table name, `schema.table` or `table`."""
    schema, _, table = name.rpartition(".")
    return (schema or None), table


USAGE = "usage"  # OpenAI protocols: each answer's token usage, as JSON text


def output_table(meta: sa.MetaData, name: str, *, role: str) -> sa.Table:
    """Predictions keyed by record id; failed records by position (see sql.py's doc)."""
    errors = role == "errors"
    record_id = _long_text() if errors else sa.String(255)
    return sa.Table(
        name,
        meta,
        sa.Column("run_uid", sa.String(64), primary_key=True),
        sa.Column("job_name", sa.String(253), primary_key=True),
        sa.Column("record_id", record_id, primary_key=not errors, nullable=False),
        sa.Column(
            "position", sa.BigInteger, primary_key=errors, nullable=False, autoincrement=False
        ),
        sa.Column("chunk", sa.BigInteger, nullable=False, index=True),
        sa.Column("reason" if errors else "prediction", _long_text()),
        sa.Column("input", _long_text()),
        *([] if errors else [sa.Column(USAGE, _long_text(), nullable=True)]),
    )


def has_usage(engine: Engine, table: sa.Table) -> bool:
    """Whether the output table has the `usage` column (tables made before it have not)."""
    columns = sa.inspect(engine).get_columns(table.name, schema=table.schema)
    return any(column["name"] == USAGE for column in columns)


def check_key(engine: Engine, table: sa.Table) -> None:
    """ConfigError when an existing table is keyed otherwise than we key it (older layout)."""
    found = sa.inspect(engine).get_pk_constraint(table.name, schema=table.schema)
    have = list(found.get("constrained_columns") or [])
    want = [c.name for c in table.primary_key.columns]
    if sorted(have) != sorted(want):
        raise ConfigError(
            f"table: {table.fullname!r} exists with primary key ({', '.join(have)}), but this "
            f"output keys its rows by ({', '.join(want)}) (failed records by position, since "
            "their ids may repeat); it was made by an older longrun: rename or drop it, or name "
            "another table"
        )


def chunks_table(meta: sa.MetaData, name: str) -> sa.Table:
    return sa.Table(
        name,
        meta,
        sa.Column("run_uid", sa.String(64), primary_key=True),
        sa.Column("job_name", sa.String(253), primary_key=True),
        sa.Column("chunk", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("committed_at", sa.DateTime, nullable=False),
        sa.Column("manifest", sa.Text),
    )


def _long_text() -> sa.types.TypeEngine[str]:
    from sqlalchemy.dialects import mysql

    return sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upsert(engine: Engine, table: sa.Table, sample: dict[str, Any]) -> sa.Executable:
    """INSERT ... ON CONFLICT (<primary key>) DO UPDATE, per dialect."""
    keys = {c.name for c in table.primary_key.columns}
    name = engine.dialect.name
    if name in ("postgresql", "sqlite"):
        module: Any = __import__(f"sqlalchemy.dialects.{name}", fromlist=["insert"])
        stmt = module.insert(table)
        updates = {k: stmt.excluded[k] for k in sample if k not in keys}
        return stmt.on_conflict_do_update(index_elements=sorted(keys), set_=updates)  # type: ignore[no-any-return]
    if name in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        mstmt = mysql.insert(table)
        return mstmt.on_duplicate_key_update(
            {k: mstmt.inserted[k] for k in sample if k not in keys}
        )
    return sa.insert(table)


def create_tables(meta: sa.MetaData, engine: Engine, *, attempts: int = 4) -> None:
    """Create the tables not there yet. The pods of a run shared by several open their sinks
    at once: one that lost the race to create a table looks again."""
    for attempt in range(attempts):
        try:
            meta.create_all(engine, checkfirst=True)
            return
        except sa.exc.DBAPIError:
            if attempt == attempts - 1:
                raise


def order_problem(table: sa.Table | None, settings: SqlStorage, *, pods: int) -> str | None:
    """Why the `pods` pods of a shared run may read the input in different orders, or None.

    Each pod reads every row and keeps those of its chunks by position (runners/shards.py), so
    every pod must see the rows in one order: a table is read ordered by `idField`, else its
    primary key; a query in its own order, which only an ORDER BY fixes.
    """
    why = f"{pods} pods share the run and each reads the input, so its order must be one"
    if table is None:
        if "order by" not in " ".join((settings.query or "").lower().split()):
            return f"query: {why}: end it with ORDER BY a unique column"
        return None
    if settings.id_field is None and not list(table.primary_key.columns):
        return f"idField: {why}: name a unique column (the table has no primary key)"
    return None
