"""`sql`: a table or query as input, a table as output (SQLite, PostgreSQL, MariaDB/MySQL).

Input streams with a server-side cursor (`stream_results` + `yield_per`), so a
table of millions of rows costs one batch of memory. A table is read ordered by
`idField` (else its primary key) so positions are stable across restarts, and a
restart seeks with OFFSET; a query is read in its own order (give it ORDER BY).
A record's id is its `idField` value, else (a table) its single-column primary
key, which identifies a row better than its position does, else its position.

Output: one transaction per chunk. It replaces the chunk's rows (delete by
chunk, then upsert keyed by the table's primary key) and records the chunk in
`<table>_chunks`, so a chunk is visible and listed as committed together or not
at all, and writing it twice leaves one copy. The completion manifest is the row
with chunk -1 in `<table>_chunks`. Every row carries the run UID and Job name,
so runs and scheduled executions share a table side by side, and a run resumes
only its own chunks.

Columns of the output table: run_uid, job_name, record_id, position, chunk,
prediction (JSON text; `reason` for the error table), input (JSON text) and, in the output
table, usage (an OpenAI answer's token usage as JSON text; NULL for other protocols; a table
made before this column keeps its layout and gets none).
Predictions are keyed by (run_uid, job_name, record_id): the pipeline admits an
id once per run and at most 255 characters (runners/recordids.py), so no row
ever replaces another run's or another record's. Failed records are keyed by
(run_uid, job_name, position), with record_id as long as it came: a record
refused for its id (too long, or a duplicate of a record that failed too) is
still written.

Errors: only what may pass is retried (a lost connection, a lock, a deadlock:
`sqlerrors.py`); anything else fails the same way every time, so it is a
ConfigError (exit 2, not retried). Messages carry the driver's first line, never
the statement or its parameters (the chunk's rows). An input only ever reads:
the SQLite connections of a source set no journal mode, so a read-only file or
volume is read as it is.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from contracts.storage import SqlStorage
from contracts.storage_fields import OPENAI_BATCH
from runners.api import (
    ConfigError,
    ErrorRecord,
    InputRecord,
    OutputRecord,
    RunContext,
    Sink,
    Source,
    StorageBackend,
)
from runners.formats import jsonable, make_record
from runners.netguard import Guard, guard_engine
from runners.secrets import read_secret
from runners.storage.sqlerrors import db_failure
from runners.storage.sqlschema import (
    USAGE,
    check_key,
    chunks_table,
    create_tables,
    has_usage,
    order_problem,
    output_table,
    split_name,
    upsert,
)
from runners.tokens import sum_usage

_YIELD_PER = 1000
_MANIFEST_CHUNK = -1


class SqlBackend(StorageBackend):
    """StorageBackend for kind `sql`."""

    def open_source(self, settings: SqlStorage, ctx: RunContext) -> SqlSource:
        """A streaming source over a table or a query."""
        return SqlSource(settings, ctx)

    def open_sink(self, settings: SqlStorage, ctx: RunContext, *, role: str) -> SqlSink:
        """A table sink; the tables are created if absent."""
        return SqlSink(settings, ctx, role=role)

    def error_settings(self, settings: SqlStorage) -> SqlStorage:
        """Default error output: the sibling table `<table>_errors`."""
        return settings.model_copy(update={"table": f"{settings.table}_errors"})


def make_engine(settings: SqlStorage, ctx: RunContext, *, writes: bool) -> Engine:
    """An engine for the settings' URL (from the Secret when `urlSecretRef` is set).

    Only an engine that `writes` turns on SQLite's WAL journal, which is a write itself.
    """
    url = settings.url
    if settings.url_secret_ref is not None:
        ref = settings.url_secret_ref
        url = read_secret(ctx, name=ref.name, key=ref.key, field="urlSecretRef")
    assert url is not None  # SqlStorage guarantees url or urlSecretRef
    check_port(url)
    try:
        engine = sa.create_engine(url, pool_pre_ping=True)
    except sa.exc.NoSuchModuleError as exc:
        raise ConfigError(f"url: {exc}") from None
    except sa.exc.ArgumentError:  # its text quotes the URL, which may hold a password
        raise ConfigError(
            "url: not a SQLAlchemy URL (dialect+driver://user@host/database); not shown here, "
            "as it may hold a password"
        ) from None
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"url: database driver {exc.name!r} is missing: pip install 'longrun[sql-drivers]'"
        ) from None
    guard_engine(engine, Guard.of(ctx))  # every new connection's host (runners/netguard.py)
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_wal if writes else _sqlite_busy_timeout)
    return engine


def check_port(url: str) -> None:
    """ConfigError (exit 2: no pod does better) when the URL's port is not a TCP port; the
    driver would only fail at connect time, as a connection error a retry cannot fix."""
    try:
        port = make_url(url).port
    except ValueError:  # SQLAlchemy's int() of the port: not a number (the URL is not shown)
        port = -1
    except sa.exc.ArgumentError:
        return  # create_engine reports a URL it cannot parse
    if port is not None and not 1 <= port <= 65535:
        shown = "is not a number" if port == -1 else f"{port} is out of range"
        raise ConfigError(f"url: port {shown}: a TCP port is a number from 1 to 65535")


def _sqlite_wal(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the input cursor keep reading while chunks commit to the same file; the mode
    # stays with the file, so an input read from it afterwards needs no pragma of its own.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_busy_timeout(dbapi_conn: Any, _record: Any) -> None:
    # Reading waits for a writer's lock instead of failing; it writes nothing.
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


class SqlSource(Source):
    """Rows of a table (ordered) or of a query, streamed."""

    def __init__(self, settings: SqlStorage, ctx: RunContext) -> None:
        self.settings = settings
        self.ctx = ctx
        self.engine = make_engine(settings, ctx, writes=False)
        try:
            self._table = self._reflect() if settings.table else None
        except BaseException:
            self.engine.dispose()
            raise
        self._id_field = self._record_id_field()
        if ctx.shard_count > 1:  # every pod reads the input: in one order (runners/shards.py)
            problem = order_problem(self._table, settings, pods=ctx.shard_count)
            if problem:
                self.engine.dispose()
                raise ConfigError(problem)

    def _reflect(self) -> sa.Table:
        assert self.settings.table is not None
        schema, name = split_name(self.settings.table)
        try:
            return sa.Table(name, sa.MetaData(), schema=schema, autoload_with=self.engine)
        except sa.exc.NoSuchTableError:
            raise ConfigError(f"table: table {self.settings.table!r} does not exist") from None
        except sa.exc.DBAPIError as exc:
            raise db_failure(
                exc, what=f"reading table {self.settings.table!r}", field="url"
            ) from None

    def _record_id_field(self) -> str | None:
        """`idField`, else the table's single-column primary key if read, else None (position)."""
        if self.settings.id_field is not None or self._table is None:
            return self.settings.id_field
        keys = list(self._table.primary_key.columns)
        wanted = self.settings.columns
        if len(keys) == 1 and (not wanted or keys[0].name in wanted):
            return str(keys[0].name)
        return None

    def _statement(self, skip: int) -> tuple[sa.Executable, dict[str, Any], int]:
        """(statement, parameters, rows the caller must still skip)."""
        if self._table is None:
            assert self.settings.query is not None
            stmt = sa.text(self.settings.query)
            names = set(stmt.compile().params)
            params = {k: v for k, v in self.ctx.parameters.items() if k in names}
            missing = names - set(params)
            if missing:
                raise ConfigError(f"query: no run parameter for :{', :'.join(sorted(missing))}")
            return stmt, params, skip
        return self._table_select().offset(skip or None), {}, 0

    def _table_select(self) -> sa.Select[Any]:
        table = self._table
        assert table is not None
        wanted = self.settings.columns
        if wanted:
            unknown = [c for c in wanted if c not in table.c]
            if unknown:
                raise ConfigError(f"columns: no column {unknown[0]!r} in {table.name!r}")
        columns = [table.c[c] for c in wanted] if wanted else list(table.c)
        return sa.select(*columns).order_by(*self._order(table))

    def _order(self, table: sa.Table) -> list[sa.ColumnElement[Any]]:
        id_field = self.settings.id_field
        if id_field is not None:
            if id_field not in table.c:
                raise ConfigError(f"idField: no column {id_field!r} in {table.name!r}")
            return [table.c[id_field]]
        return list(table.primary_key.columns)

    def records(self, skip: int) -> Generator[InputRecord, None, None]:
        """Rows with position >= skip, as dicts of JSON-friendly values."""
        stmt, params, python_skip = self._statement(skip)
        id_field, record_field = self._id_field, self.settings.record_field
        batch = self.settings.format == OPENAI_BATCH
        position = skip - python_skip
        try:
            with self.engine.connect() as conn:
                options = conn.execution_options(stream_results=True, yield_per=_YIELD_PER)
                result = options.execute(stmt, params)
                keys = list(result.keys())
                for partition in result.partitions():
                    for row in partition:
                        if position >= skip:
                            data = {k: _plain(v) for k, v in zip(keys, row, strict=True)}
                            yield make_record(
                                data,
                                position,
                                id_field=id_field,
                                record_field=record_field,
                                batch=batch,
                            )
                        position += 1
        except sa.exc.DBAPIError as exc:
            field = "table" if self._table is not None else "query"
            raise db_failure(exc, what="reading input", field=field) from None

    def total(self) -> int | None:
        """COUNT(*) of the table; None for a query."""
        if self._table is None:
            return None
        with self.engine.connect() as conn:
            return int(
                conn.execute(sa.select(sa.func.count()).select_from(self._table)).scalar_one()
            )

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()


class SqlSink(Sink):
    """Chunks as rows of an output table plus a commit table."""

    counts_committed = True  # its commit table says what it holds

    def __init__(self, settings: SqlStorage, ctx: RunContext, *, role: str) -> None:
        assert settings.table is not None  # check_output guarantees it
        self.ctx = ctx
        self.role = role
        self.engine = make_engine(settings, ctx, writes=True)
        self.location = f"{self.engine.url.render_as_string(hide_password=True)}#{settings.table}"
        schema, name = split_name(settings.table)
        meta = sa.MetaData(schema=schema)
        self.table = output_table(meta, name, role=role)
        self.chunks = chunks_table(meta, f"{name}_chunks")
        try:
            create_tables(meta, self.engine)
            check_key(self.engine, self.table)
            # A table made before the usage column keeps its layout: usage is left out there.
            self._usage = role != "errors" and has_usage(self.engine, self.table)
        except sa.exc.DBAPIError as exc:
            self.engine.dispose()
            what = f"creating {settings.table!r}"
            raise db_failure(exc, what=what, field="table") from None
        except ConfigError:
            self.engine.dispose()
            raise

    def _mine(self, table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(table.c.run_uid == self.ctx.run_uid, table.c.job_name == self.ctx.job_name)

    def committed(self) -> set[int]:
        """Chunks listed in the commit table for this run and Job."""
        stmt = sa.select(self.chunks.c.chunk).where(
            self._mine(self.chunks), self.chunks.c.chunk != _MANIFEST_CHUNK
        )
        with self.engine.connect() as conn:
            return {int(c) for c in conn.execute(stmt).scalars()}

    def committed_records(self, chunks: set[int]) -> int:
        """Records in the chunks of `chunks`, from the commit table's `records` column."""
        c = self.chunks.c
        stmt = sa.select(c.chunk, c.records).where(
            self._mine(self.chunks), c.chunk != _MANIFEST_CHUNK
        )
        with self.engine.connect() as conn:
            return sum(int(n) for chunk, n in conn.execute(stmt) if int(chunk) in chunks)

    def committed_usage(self, chunks: set[int]) -> dict[str, int]:
        """Token counts of the usage column in the rows of `chunks`."""
        if not self._usage or not chunks:
            return {}
        c = self.table.c
        stmt = sa.select(c.chunk, c[USAGE]).where(self._mine(self.table), c[USAGE].is_not(None))
        with self.engine.connect() as conn:
            rows = [json.loads(u) for chunk, u in conn.execute(stmt) if int(chunk) in chunks]
        return sum_usage(rows)

    def write_chunk(self, index: int, records: Sequence[OutputRecord | ErrorRecord]) -> None:
        """Replace chunk `index` and mark it committed, in one transaction."""
        rows = [self._row(index, r) for r in records]
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.delete(self.table).where(self._mine(self.table), self.table.c.chunk == index)
                )
                if rows:
                    conn.execute(upsert(self.engine, self.table, rows[0]), rows)
                self._mark(conn, index, len(rows), None)
        except sa.exc.DBAPIError as exc:
            raise db_failure(exc, what=f"writing chunk {index}", field="table") from None

    def _row(self, index: int, record: OutputRecord | ErrorRecord) -> dict[str, Any]:
        last = record.reason if isinstance(record, ErrorRecord) else _dumps(record.prediction)
        row = {
            "run_uid": self.ctx.run_uid,
            "job_name": self.ctx.job_name,
            "record_id": record.id,
            "position": record.position,
            "chunk": index,
            "reason" if self.role == "errors" else "prediction": last,
            "input": _dumps(record.input),
        }
        if self._usage:
            usage = getattr(record, "usage", None)
            row[USAGE] = None if usage is None else _dumps(usage)
        return row

    def _mark(self, conn: sa.Connection, index: int, count: int, manifest: str | None) -> None:
        c = self.chunks.c
        conn.execute(sa.delete(self.chunks).where(self._mine(self.chunks), c.chunk == index))
        conn.execute(
            sa.insert(self.chunks).values(
                run_uid=self.ctx.run_uid,
                job_name=self.ctx.job_name,
                chunk=index,
                records=count,
                committed_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
                manifest=manifest,
            )
        )

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Record the completion manifest (chunk -1 of the commit table)."""
        manifest = json.dumps({"role": self.role, **summary}, sort_keys=True)
        try:
            with self.engine.begin() as conn:
                self._mark(conn, _MANIFEST_CHUNK, int(summary.get("recordsWritten", 0)), manifest)
        except sa.exc.DBAPIError as exc:
            # Two pods of a run that found every chunk committed at once write the same
            # manifest (runners/shards.py): the other one's may be there; else a deadlock
            # between them is retried (sqlerrors.py), like any other.
            mine = sa.and_(self._mine(self.chunks), self.chunks.c.chunk == _MANIFEST_CHUNK)
            with self.engine.connect() as conn:
                if conn.execute(sa.select(self.chunks.c.manifest).where(mine)).first() is None:
                    raise db_failure(exc, what="writing the manifest", field="table") from None

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()


_PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    return value if isinstance(value, _PLAIN) else jsonable(value)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=jsonable, allow_nan=False, sort_keys=True)
