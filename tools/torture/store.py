"""The guarded store: what the lock protects, kept outside the lock tables.

Per resource it keeps the largest fencing token it has seen (``max_token``),
the token of the last accepted write (``write_token``) and a counter.

- A write carrying a token smaller than the largest seen is refused; an
  accepted write stores its token, sets the counter to the value the writer
  read earlier plus one, and appends a row to a log, all in one transaction.
  The counter is read before that transaction on purpose: two holders at once
  would both read the same value and one increment would be lost, which the
  checker sees.
- A read (a reader's) carrying a token smaller than the last write's is
  refused: a writer granted after the reader has written. An accepted read
  raises the largest token seen to the reader's, so that a writer granted
  before the reader (whose lock expired) can no longer write: a store guarded
  by a read-write lock must see every holder's token, readers' too.

On PostgreSQL and MariaDB the store is two tables that the runner creates in
the lock database (not a migration of the app); on SQLite it is a file of its own.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

COLUMNS = "resource {text} PRIMARY KEY, max_token bigint NOT NULL, write_token bigint NOT NULL, counter bigint NOT NULL"
LOG = "resource {text} NOT NULL, token bigint NOT NULL, write_id {text} NOT NULL, counter bigint NOT NULL"
SCHEMA = {
    "postgresql": (
        f"CREATE TABLE IF NOT EXISTS torture_store ({COLUMNS.format(text='text')})",
        f"CREATE TABLE IF NOT EXISTS torture_store_log (id bigserial PRIMARY KEY, {LOG.format(text='text')})",
    ),
    "mysql": (
        f"CREATE TABLE IF NOT EXISTS torture_store ({COLUMNS.format(text='varchar(255)')}) ENGINE=InnoDB",
        f"CREATE TABLE IF NOT EXISTS torture_store_log (id bigint AUTO_INCREMENT PRIMARY KEY, "
        f"{LOG.format(text='varchar(255)')}) ENGINE=InnoDB",
    ),
    "sqlite": (
        f"CREATE TABLE IF NOT EXISTS torture_store ({COLUMNS.format(text='text')})",
        f"CREATE TABLE IF NOT EXISTS torture_store_log (id integer PRIMARY KEY AUTOINCREMENT, {LOG.format(text='text')})",
    ),
}
INSERT = {
    "postgresql": "INSERT INTO torture_store VALUES (%s, 0, 0, 0) ON CONFLICT DO NOTHING",
    "mysql": "INSERT IGNORE INTO torture_store VALUES (%s, 0, 0, 0)",
    "sqlite": "INSERT OR IGNORE INTO torture_store VALUES (?, 0, 0, 0)",
}

# PostgreSQL, one statement each: the fenced update and its log row commit together.
PG_WRITE = (
    "WITH taken AS (UPDATE torture_store SET max_token = %(token)s, write_token = %(token)s, "
    "counter = %(counter)s WHERE resource = %(resource)s AND max_token <= %(token)s "
    "RETURNING resource) INSERT INTO torture_store_log (resource, token, write_id, counter) "
    "SELECT resource, %(token)s, %(write_id)s, %(counter)s FROM taken RETURNING id"
)
PG_READ = (
    "UPDATE torture_store SET max_token = GREATEST(max_token, %(token)s) "
    "WHERE resource = %(resource)s AND write_token <= %(token)s RETURNING counter"
)
# SQLite and MariaDB: in one transaction. (%s or ? by driver.)
WRITE = (
    "UPDATE torture_store SET max_token = {p}, write_token = {p}, counter = {p} "
    "WHERE resource = {p} AND max_token <= {p}"
)
LOG_ROW = (
    "INSERT INTO torture_store_log (resource, token, write_id, counter) VALUES ({p}, {p}, {p}, {p})"
)
READ = (
    "UPDATE torture_store SET max_token = {greatest}(max_token, {p}) "
    "WHERE resource = {p} AND write_token <= {p}"
)
COUNTER = "SELECT counter FROM torture_store WHERE resource = {p}"


class Store(Protocol):
    def read_counter(self, resource: str) -> int: ...

    def write(self, resource: str, token: int, write_id: str, counter: int) -> bool: ...

    def read(self, resource: str, token: int) -> tuple[bool, int | None]: ...

    def close(self) -> None: ...


def store_kind(location: str) -> str:
    """The store's database for a lock database URL or a SQLite file."""
    scheme = urlsplit(location).scheme
    return {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql"}.get(
        scheme, "sqlite"
    )


class PostgresStore:
    def __init__(self, url: str, application_name: str) -> None:
        self.url = url
        self.application_name = application_name
        self._connection: Any = None

    def _run(self, sql: str, params: Any) -> Any:
        import psycopg

        try:
            if self._connection is None or self._connection.closed:
                self._connection = psycopg.connect(
                    self.url, autocommit=True, application_name=self.application_name
                )
            with self._connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchone()
        except Exception:
            self.close()  # reconnect next time, after a restart or a terminated backend
            raise

    def read_counter(self, resource: str) -> int:
        return int(self._run(COUNTER.format(p="%s"), [resource])[0])

    def write(self, resource: str, token: int, write_id: str, counter: int) -> bool:
        params = {"token": token, "counter": counter, "resource": resource, "write_id": write_id}
        return self._run(PG_WRITE, params) is not None

    def read(self, resource: str, token: int) -> tuple[bool, int | None]:
        row = self._run(PG_READ, {"token": token, "resource": resource})
        return (False, None) if row is None else (True, int(row[0]))

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class TransactionStore:
    """SQLite's and MariaDB's: each write or read one transaction of a few
    statements, on a connection that ``connect`` makes."""

    placeholder = "?"
    greatest = "max"

    def __init__(self) -> None:
        self._db: Any = None

    def connect(self) -> Any:
        raise NotImplementedError

    def begin(self, cursor: Any) -> None:
        cursor.execute("BEGIN")

    def _transaction(self, statements: list[tuple[str, list[Any]]], read: bool = False) -> Any:
        """Run ``statements`` in one transaction, stopping (and committing)
        after the first that changes no row; the rows the first changed, and
        the counter read last when ``read``."""
        try:
            if self._db is None:
                self._db = self.connect()
            cursor = self._db.cursor()
            self.begin(cursor)
            try:
                first = None
                for sql, params in statements:
                    cursor.execute(sql.format(p=self.placeholder, greatest=self.greatest), params)
                    first = cursor.rowcount if first is None else first
                    if not first:
                        break
                counter = cursor.fetchone()[0] if read and first else None
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")
            return first, counter
        except Exception:
            self.close()
            raise

    def read_counter(self, resource: str) -> int:
        try:
            if self._db is None:
                self._db = self.connect()
            cursor = self._db.cursor()
            cursor.execute(COUNTER.format(p=self.placeholder), [resource])
            return int(cursor.fetchone()[0])
        except Exception:
            self.close()
            raise

    def write(self, resource: str, token: int, write_id: str, counter: int) -> bool:
        taken, _ = self._transaction(
            [
                (WRITE, [token, token, counter, resource, token]),
                (LOG_ROW, [resource, token, write_id, counter]),
            ]
        )
        return bool(taken)

    def read(self, resource: str, token: int) -> tuple[bool, int | None]:
        taken, counter = self._transaction(
            [(READ, [token, resource, token]), (COUNTER, [resource])], read=True
        )
        return (True, int(counter)) if taken else (False, None)

    def close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            finally:
                self._db = None


class SqliteStore(TransactionStore):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def connect(self) -> Any:
        return sqlite3.connect(self.path, timeout=60, isolation_level=None)

    def begin(self, cursor: Any) -> None:
        cursor.execute("BEGIN IMMEDIATE")


class MariadbStore(TransactionStore):
    placeholder = "%s"
    greatest = "GREATEST"

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def connect(self) -> Any:
        return mysql_connect(self.url)


def mysql_connect(url: str, **options: Any) -> Any:
    """A MySQLdb connection to ``url``, counting matched rows (not changed
    ones) as an UPDATE's rowcount, as the other databases do."""
    import MySQLdb  # type: ignore[import-untyped]
    from MySQLdb.constants import CLIENT  # type: ignore[import-untyped]

    parts = urlsplit(url)
    if parts.path.lstrip("/"):
        options["database"] = parts.path.lstrip("/")
    if parts.password:
        options["password"] = unquote(parts.password)
    return MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or ""),
        client_flag=CLIENT.FOUND_ROWS,
        connect_timeout=5,
        autocommit=True,
        **options,
    )


def open_store(location: str, application_name: str) -> Store:
    kind = store_kind(location)
    if kind == "postgresql":
        return PostgresStore(location, application_name)
    if kind == "mysql":
        return MariadbStore(location)
    return SqliteStore(location)


def _connect(location: str) -> Any:
    kind = store_kind(location)
    if kind == "postgresql":
        import psycopg

        return psycopg.connect(location, autocommit=True)
    if kind == "mysql":
        return mysql_connect(location)
    return sqlite3.connect(location, isolation_level=None)


def create(location: str, resources: list[str]) -> None:
    """Create the store's tables with a row per resource (tokens 0, counter 0)."""
    kind = store_kind(location)
    connection = _connect(location)
    try:
        cursor = connection.cursor()
        for statement in SCHEMA[kind]:
            cursor.execute(statement)
        for resource in resources:
            cursor.execute(INSERT[kind], [resource])
    finally:
        connection.close()


def dump(location: str) -> dict[str, Any]:
    """The store's final state: per resource its largest tokens and counter, and the log."""
    connection = _connect(location)
    try:
        cursor = connection.cursor()
        cursor.execute("SELECT resource, max_token, write_token, counter FROM torture_store")
        resources = list(cursor.fetchall())
        cursor.execute("SELECT id, resource, token, write_id, counter FROM torture_store_log")
        log = list(cursor.fetchall())
    finally:
        connection.close()
    return {
        "resources": {
            r: {"max_token": t, "write_token": w, "counter": c} for r, t, w, c in resources
        },
        "log": [list(row) for row in log],
    }
