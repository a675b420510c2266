"""The databases of ``benchmarks.kinds``: Django settings that every process of
the run builds alike from the environment, each database's raw one-statement
floor, and the CPU of its server.

Aliases are named by database: ``postgresql`` (``DATABASE_URL`` when it is a
PostgreSQL one, else ``DLOCK_PG_URL``), ``mariadb`` (``DLOCK_MARIADB_URL``,
else ``DLOCK_MYSQL_URL``, which ``scripts/mariadb-server.sh`` exports) and
``sqlite`` (a file in WAL mode, transactions ``IMMEDIATE``, whose path the
first process puts in ``BENCH_KINDS_SQLITE`` for the processes it starts).
A database without a URL is left out. ``postgresql_counted`` and
``mariadb_counted`` reach the same servers through the counting proxy
(``benchmarks.proxy``), in the first process only.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django
from django.conf import settings

from benchmarks.contenders import FLOOR_TABLE, Cycle, _floor_cycle, _floor_sql, psycopg_connect
from benchmarks.cpu import parent_of, tree_cpu

SQLITE_ENV = "BENCH_KINDS_SQLITE"
LABELS = {"postgresql": "PostgreSQL", "sqlite": "SQLite", "mariadb": "MariaDB"}
COUNTED = "_counted"


def urls() -> dict[str, str]:
    """The URL of each database this run measures, by alias."""
    found: dict[str, str] = {}
    given = os.environ.get("DATABASE_URL", "")
    postgres = given if given.startswith("postgres") else os.environ.get("DLOCK_PG_URL", "")
    if postgres:
        found["postgresql"] = postgres
    if SQLITE_ENV not in os.environ:
        os.environ[SQLITE_ENV] = f"{tempfile.mkdtemp(prefix='dlock-kinds-')}/kinds.sqlite3"
    found["sqlite"] = f"sqlite:///{os.environ[SQLITE_ENV]}"
    mariadb = given if given.startswith("mysql") else ""
    mariadb = (
        mariadb or os.environ.get("DLOCK_MARIADB_URL") or os.environ.get("DLOCK_MYSQL_URL", "")
    )
    if mariadb:
        found["mariadb"] = mariadb
    return found


def configure(counted_ports: dict[str, int] | None = None) -> list[str]:
    """Configure Django with every database of ``urls()``; the aliases measured.
    ``counted_ports``: the counting proxy's port for an alias (its twin
    ``<alias>_counted`` goes through it)."""
    import dj_database_url

    databases: dict[str, Any] = {}
    for alias, url in urls().items():
        database = dj_database_url.parse(url)
        if alias == "sqlite":
            database["OPTIONS"] = {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL",
            }
        databases[alias] = database
    aliases = list(databases)
    for alias, port in (counted_ports or {}).items():
        databases[alias + COUNTED] = {**databases[alias], "HOST": "127.0.0.1", "PORT": port}
    # Django needs a default; the lock operations always name their alias.
    databases["default"] = databases[aliases[0]]
    settings.configure(
        DEBUG=False,
        DATABASES=databases,
        DLOCK_DATABASE=aliases[0],
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_dlock"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        LOGGING_CONFIG=None,
    )
    django.setup()
    return aliases


def migrate(aliases: list[str]) -> None:
    from django.core.management import call_command

    for alias in aliases:
        call_command("migrate", database=alias, verbosity=0, skip_checks=True)


def server_address(alias: str) -> tuple[str, int]:
    from django.db import connections

    settings_dict = connections[alias].settings_dict
    return settings_dict["HOST"] or "127.0.0.1", int(settings_dict["PORT"])


def version(alias: str) -> str:
    from django.db import connections

    connection = connections[alias]
    numbers = ".".join(map(str, connection.get_database_version()))
    return f"{LABELS[alias]} {numbers}"


# -- the raw one-statement floor of each database --------------------------------------


def create_floor_table(alias: str) -> None:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        if alias == "mariadb":
            from benchmarks.mariadb import FLOOR_COLUMNS

            cursor.execute(f"CREATE TABLE {FLOOR_TABLE} ({FLOOR_COLUMNS}) ENGINE=InnoDB")
        else:
            cursor.execute(
                f"CREATE TABLE {FLOOR_TABLE} (resource varchar(255) PRIMARY KEY, "
                "owner varchar(255) NOT NULL, expires_at timestamp NOT NULL, "
                "fencing_token bigint NOT NULL)"
            )


def floor(alias: str) -> Callable[[str], Cycle]:
    """One statement per operation on a raw driver connection in autocommit:
    an upsert to acquire, a delete to release (``benchmarks.contenders``)."""
    from django.db import connections

    settings_dict = dict(connections[alias].settings_dict)

    def make(prefix: str) -> Cycle:
        if alias == "postgresql":
            raw = psycopg_connect(settings_dict)
            acquire, release = _floor_sql("now()", "now() + interval '30 seconds'")
            return _floor_cycle(raw, acquire, release, prefix)
        if alias == "sqlite":
            import sqlite3

            connection = sqlite3.connect(settings_dict["NAME"], isolation_level=None, timeout=20)
            connection.execute("PRAGMA journal_mode=WAL")
            acquire, release = (
                sql.replace("%s", "?")
                for sql in _floor_sql("datetime('now')", "datetime('now', '+30 seconds')")
            )
            return _floor_cycle(connection, acquire, release, prefix)
        return _mariadb_floor(settings_dict, prefix)

    return make


def mariadb_connection(settings_dict: dict[str, Any]) -> Any:
    """A raw MySQLdb connection in autocommit, as the MariaDB floor runs on."""
    import MySQLdb  # type: ignore[import-untyped]

    return MySQLdb.connect(
        host=settings_dict["HOST"],
        port=int(settings_dict["PORT"]),
        user=settings_dict["USER"],
        password=settings_dict["PASSWORD"],
        database=settings_dict["NAME"],
        autocommit=True,
    )


def _mariadb_floor(settings_dict: dict[str, Any], prefix: str) -> Cycle:
    from benchmarks.mariadb import floor_sql

    raw = mariadb_connection(settings_dict)
    acquire, release = floor_sql()

    def cycle(n: int) -> None:
        resource = f"{prefix}:{n % 10}"
        with raw.cursor() as cursor:
            cursor.execute(acquire, (resource, prefix))
            cursor.execute(release, (resource, prefix))

    return cycle


# -- server CPU --------------------------------------------------------------------


def server_cpu(alias: str) -> Callable[[], float] | None:
    """CPU seconds of the database server so far (PostgreSQL: the postmaster
    and its backends; MariaDB: mariadbd, from its pid file); None for SQLite,
    whose work is the client's."""
    from django.db import connections

    if alias == "sqlite":
        return None
    with connections[alias].cursor() as cursor:
        if alias == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
            (backend,) = cursor.fetchone()
            root = parent_of(backend)
        else:
            cursor.execute("SELECT @@pid_file")
            (pid_file,) = cursor.fetchone()
            try:
                root = int(Path(pid_file).read_text().split()[0])
            except (OSError, ValueError, IndexError):  # a server on another host
                return None
    return lambda: tree_cpu(root)
