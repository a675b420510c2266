"""The guarded store: what the lock protects, kept outside the lock table.

Per resource it keeps the largest fencing token it has seen and a counter. A
write carrying a token smaller than the largest seen is refused; an accepted
write stores its token, sets the counter to the value the writer read earlier
plus one, and appends a row to a log, all in one transaction. The counter is
read before that transaction on purpose: two holders at once would both read
the same value and one increment would be lost, which the checker sees.

On PostgreSQL the store is two tables that the runner creates in the lock
database (not a migration of the app); on SQLite it is a file of its own.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol

PG_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS torture_store (resource text PRIMARY KEY, "
    "max_token bigint NOT NULL, counter bigint NOT NULL)",
    "CREATE TABLE IF NOT EXISTS torture_store_log (id bigserial PRIMARY KEY, "
    "resource text NOT NULL, token bigint NOT NULL, write_id text NOT NULL, counter bigint NOT NULL)",
)
SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS torture_store (resource text PRIMARY KEY, "
    "max_token integer NOT NULL, counter integer NOT NULL)",
    "CREATE TABLE IF NOT EXISTS torture_store_log (id integer PRIMARY KEY AUTOINCREMENT, "
    "resource text NOT NULL, token integer NOT NULL, write_id text NOT NULL, counter integer NOT NULL)",
)

# One statement: the fenced update and its log row commit together or not at all.
PG_WRITE = (
    "WITH taken AS (UPDATE torture_store SET max_token = %(token)s, counter = %(counter)s "
    "WHERE resource = %(resource)s AND max_token <= %(token)s RETURNING resource) "
    "INSERT INTO torture_store_log (resource, token, write_id, counter) "
    "SELECT resource, %(token)s, %(write_id)s, %(counter)s FROM taken RETURNING id"
)


class Store(Protocol):
    def read_counter(self, resource: str) -> int: ...

    def write(self, resource: str, token: int, write_id: str, counter: int) -> bool: ...

    def close(self) -> None: ...


class PostgresStore:
    def __init__(self, url: str, application_name: str) -> None:
        self.url = url
        self.application_name = application_name
        self._connection: Any = None

    def _cursor(self) -> Any:
        import psycopg

        if self._connection is None or self._connection.closed:
            self._connection = psycopg.connect(
                self.url, autocommit=True, application_name=self.application_name
            )
        return self._connection.cursor()

    def read_counter(self, resource: str) -> int:
        try:
            with self._cursor() as cursor:
                cursor.execute("SELECT counter FROM torture_store WHERE resource = %s", [resource])
                return int(cursor.fetchone()[0])
        except Exception:
            self.close()  # reconnect next time, after a restart or a terminated backend
            raise

    def write(self, resource: str, token: int, write_id: str, counter: int) -> bool:
        params = {"token": token, "counter": counter, "resource": resource, "write_id": write_id}
        try:
            with self._cursor() as cursor:
                cursor.execute(PG_WRITE, params)
                return cursor.fetchone() is not None
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class SqliteStore:
    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, timeout=60, isolation_level=None)

    def read_counter(self, resource: str) -> int:
        row = self._db.execute(
            "SELECT counter FROM torture_store WHERE resource = ?", [resource]
        ).fetchone()
        return int(row[0])

    def write(self, resource: str, token: int, write_id: str, counter: int) -> bool:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            taken = self._db.execute(
                "UPDATE torture_store SET max_token = ?, counter = ? "
                "WHERE resource = ? AND max_token <= ?",
                [token, counter, resource, token],
            ).rowcount
            if taken:
                self._db.execute(
                    "INSERT INTO torture_store_log (resource, token, write_id, counter) "
                    "VALUES (?, ?, ?, ?)",
                    [resource, token, write_id, counter],
                )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return bool(taken)

    def close(self) -> None:
        self._db.close()


def open_store(kind: str, location: str, application_name: str) -> Store:
    if kind == "postgresql":
        return PostgresStore(location, application_name)
    return SqliteStore(location)


def create(kind: str, location: str, resources: list[str]) -> None:
    """Create the store's tables with a row per resource (token 0, counter 0)."""
    if kind == "postgresql":
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            for statement in PG_SCHEMA:
                connection.execute(statement)
            for resource in resources:
                connection.execute(
                    "INSERT INTO torture_store VALUES (%s, 0, 0) ON CONFLICT DO NOTHING",
                    [resource],
                )
        return
    db = sqlite3.connect(location, isolation_level=None)
    for statement in SQLITE_SCHEMA:
        db.execute(statement)
    for resource in resources:
        db.execute("INSERT OR IGNORE INTO torture_store VALUES (?, 0, 0)", [resource])
    db.close()


def dump(kind: str, location: str) -> dict[str, Any]:
    """The store's final state: per resource its largest token and counter, and the log."""
    if kind == "postgresql":
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            state = connection.execute("SELECT resource, max_token, counter FROM torture_store")
            resources = list(state.fetchall())
            log = connection.execute(
                "SELECT id, resource, token, write_id, counter FROM torture_store_log"
            ).fetchall()
    else:
        db = sqlite3.connect(location)
        resources = db.execute("SELECT resource, max_token, counter FROM torture_store").fetchall()
        log = db.execute(
            "SELECT id, resource, token, write_id, counter FROM torture_store_log"
        ).fetchall()
        db.close()
    return {
        "resources": {r: {"max_token": t, "counter": c} for r, t, c in resources},
        "log": [list(row) for row in log],
    }
