"""Which SQL errors are worth retrying, and what a failure says (runners/storage/sql.py).

Only what may pass is retried (a lost connection, a lock, a deadlock); anything else fails
the same way every time, so it is a ConfigError naming the setting. Messages carry the
driver's first line, never the statement or its parameters (the chunk's rows).
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa

from runners.api import ConfigError, TransientError

# PostgreSQL SQLSTATE classes worth retrying: connection, transaction rollback (serialization,
# deadlock), insufficient resources, lock not available, operator intervention, system error,
# and a unique violation: rows are upserted by their key, so only another pod of the Job
# committing the same chunk (its mark in `<table>_chunks`) at the same moment makes one.
_PG_TRANSIENT = ("08", "23505", "40", "53", "55P03", "57", "58")
# MySQL/MariaDB server errors worth retrying (client errors, >= 2000, are all connection ones):
# too many connections, shutdown, network read/write, lock wait timeout, deadlock, interrupted,
# connection killed, and a duplicate key (as for PostgreSQL).
_MYSQL_TRANSIENT = frozenset({1040, 1053, 1062, 1158, 1159, 1160, 1161, 1205, 1213, 1317, 1927})
_SQLITE_TRANSIENT = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CONSTRAINT_PRIMARYKEY")


def _transient(exc: sa.exc.DBAPIError) -> bool:
    """Worth retrying: a lost or refused connection, a lock, a deadlock; not a missing table
    or column, a permission, a bad value or a read-only database, which fail every time."""
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    state = getattr(orig, "sqlstate", None)  # psycopg; None when no server answered
    if isinstance(state, str):
        return state.startswith(_PG_TRANSIENT)
    if isinstance(orig, sqlite3.Error):  # a file: only another connection's lock passes
        return str(getattr(orig, "sqlite_errorname", "")).startswith(_SQLITE_TRANSIENT)
    code = orig.args[0] if orig is not None and orig.args else None
    if isinstance(code, int):  # PyMySQL: (code, message)
        return code >= 2000 or code in _MYSQL_TRANSIENT
    return isinstance(exc, sa.exc.OperationalError)


def _db_message(exc: sa.exc.DBAPIError) -> str:
    """The driver's own message, first line only: never the statement or its parameters."""
    lines = str(exc.orig).strip().splitlines()
    return lines[0][:300] if lines else type(exc.orig).__name__


def db_failure(exc: sa.exc.DBAPIError, *, what: str, field: str) -> Exception:
    """TransientError when worth retrying, else ConfigError naming `field` (see module doc)."""
    if _transient(exc):
        return TransientError(f"{what}: {_db_message(exc)}")
    return ConfigError(f"{field}: {what}: {_db_message(exc)}")
