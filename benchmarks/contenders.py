"""The lock implementations measured side by side, as acquire + release cycles.

Each contender makes a ``cycle(n)`` function: acquire a free resource, then
release it, raising if the free resource was not acquired (it may return the
seconds its acquisition took, which ``single.measure_round`` keeps). ``make(prefix)``
opens the contender's own connections, so that each client process calls it
after it started. The floor and django-dlock take their names in turn from
1,000 of their own (``benchmarks.floor_sql``, issue 45: a floor that deletes and
inserts ten rows again and again costs its server more, flattering a ratio to
it); the other locks use ``{prefix}:{n % 10}``, ten resources again and again.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from benchmarks import floor_sql

Cycle = Callable[[int], object]

FLOOR_TABLE = "bench_floor_locks"


@dataclass(frozen=True)
class Contender:
    name: str
    server: str  # "postgresql", "sqlite", "redis", "mariadb": whose CPU to read, which floor
    make: Callable[[str], Cycle]
    floor: bool = False


def psycopg_connect(settings: dict[str, Any], port: int | None = None) -> Any:
    """A plain psycopg 3 connection, in autocommit."""
    import psycopg

    return psycopg.connect(
        host=settings["HOST"],
        port=port or settings["PORT"],
        user=settings["USER"],
        dbname=settings["NAME"],
        password=settings["PASSWORD"] or None,
        autocommit=True,
    )


def create_floor_tables() -> None:
    """The floors' tables on each database: the lock table's shape, nothing else
    (``floor_sql.TABLE``; ``FLOOR_TABLE`` for the floors of ``benchmarks.acquire``)."""
    from django.db import connections

    for alias in ("default", "sqlite"):
        with connections[alias].cursor() as cursor:
            floor_sql.create_table(connections[alias].vendor, cursor)
            cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
            cursor.execute(
                f"CREATE TABLE {FLOOR_TABLE} (resource varchar(255) PRIMARY KEY, "
                "owner varchar(255) NOT NULL, expires_at timestamp NOT NULL, "
                "fencing_token bigint NOT NULL)"
            )


def _floor_sql(now: str, plus: str) -> tuple[str, str]:
    acquire = (
        f"INSERT INTO {FLOOR_TABLE} (resource, owner, expires_at, fencing_token) "
        f"VALUES (%s, %s, {plus}, 1) ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, "
        f"expires_at = excluded.expires_at, fencing_token = {FLOOR_TABLE}.fencing_token + 1 "
        f"WHERE {FLOOR_TABLE}.expires_at <= {now} OR {FLOOR_TABLE}.owner = excluded.owner "
        "RETURNING fencing_token"
    )
    release = f"DELETE FROM {FLOOR_TABLE} WHERE resource = %s AND owner = %s"
    return acquire, release


def postgres_floor(settings: dict[str, Any], port: int | None = None) -> Callable[[str], Cycle]:
    """One round trip per operation: an upsert to acquire, a delete to release
    (``benchmarks.floor_sql``), on 1,000 names of the prefix."""

    def make(prefix: str) -> Cycle:
        raw = psycopg_connect(settings, port)
        return floor_sql.raw_cycle("postgresql", raw, floor_sql.names(prefix), prefix)

    return make


def postgres_four_statements(settings: dict[str, Any]) -> Callable[[str], Cycle]:
    """django-dlock's design by hand with psycopg, without Django: BEGIN,
    SELECT ... FOR UPDATE, UPDATE (or INSERT), COMMIT per operation."""

    def make(prefix: str) -> Cycle:
        raw = psycopg_connect(settings)
        select = (
            f"SELECT owner, expires_at, statement_timestamp() FROM {FLOOR_TABLE} "
            "WHERE resource = %s FOR UPDATE"
        )
        insert = f"INSERT INTO {FLOOR_TABLE} VALUES (%s, %s, now() + %s, 1)"
        update = f"UPDATE {FLOOR_TABLE} SET owner = %s, expires_at = %s WHERE resource = %s"

        def operation(resource: str, owner: str, ttl: timedelta) -> None:
            with raw.transaction():
                row = raw.execute(select, (resource,)).fetchone()
                if row is None:
                    raw.execute(insert, (resource, owner, ttl))
                else:
                    raw.execute(update, (owner, row[2] + ttl, resource))

        def cycle(n: int) -> None:
            resource = f"{prefix}:{n % 10}"
            operation(resource, prefix, timedelta(seconds=30))
            operation(resource, "", timedelta(0))

        return cycle

    return make


def sqlite_floor(path: str) -> Callable[[str], Cycle]:
    def make(prefix: str) -> Cycle:
        raw = floor_sql.sqlite_connection(path)
        return floor_sql.raw_cycle("sqlite", raw, floor_sql.names(prefix), prefix)

    return make


def dlock(using: str) -> Callable[[str], Cycle]:
    """The manager's acquire and release, on 1,000 names of the prefix, as the floors."""

    def make(prefix: str) -> Cycle:
        return floor_sql.manager_cycle(using, floor_sql.names(prefix), prefix)

    return make


def advisory(settings: dict[str, Any], port: int | None = None) -> Callable[[str], Cycle]:
    """Session advisory locks: no table, no expiry; the lock ends with the session."""

    def make(prefix: str) -> Cycle:
        raw = psycopg_connect(settings, port)

        def cycle(n: int) -> None:
            key = zlib.crc32(f"{prefix}:{n % 10}".encode())
            if not raw.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
                raise RuntimeError("the advisory lock was not free")
            raw.execute("SELECT pg_advisory_unlock(%s)", (key,))

        return cycle

    return make


def db_mutex() -> Callable[[str], Cycle]:
    """django-db-mutex on the default database (it knows no other)."""

    def make(prefix: str) -> Cycle:
        from db_mutex.db_mutex import db_mutex as mutex

        def cycle(n: int) -> None:
            with mutex(f"{prefix}:{n % 10}"):
                pass

        return cycle

    return make


def _redis_lock_cycle(port: int, new_lock: Callable[[Any, str], Any]) -> Callable[[str], Cycle]:
    """Acquire (without waiting) and release ``new_lock(client, resource)``."""

    def make(prefix: str) -> Cycle:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)

        def cycle(n: int) -> None:
            lock = new_lock(client, f"{prefix}:{n % 10}")
            if not lock.acquire(blocking=False):
                raise RuntimeError(f"{lock!r} failed to acquire a free resource")
            lock.release()

        return cycle

    return make


def redis_py(port: int) -> Callable[[str], Cycle]:
    return _redis_lock_cycle(port, lambda client, resource: client.lock(resource, timeout=30))


def python_redis_lock(port: int) -> Callable[[str], Cycle]:
    import redis_lock

    return _redis_lock_cycle(
        port, lambda client, resource: redis_lock.Lock(client, resource, expire=30)
    )


def mariadb_contenders() -> list[Contender]:
    """The hook for MariaDB: django-dlock on the ``mariadb`` alias when
    DLOCK_MARIADB_URL is set. (Its floor comes with the MariaDB backend.)"""
    from django.db import connections

    if "mariadb" not in connections:
        return []
    return [Contender("django-dlock, MariaDB", "mariadb", dlock("mariadb"))]


def _floor_cycle(raw: Any, acquire: str, release: str, prefix: str) -> Callable[[int], None]:
    """One acquire + release of the raw one-statement floor, on ``raw``'s connection."""

    def cycle(n: int) -> None:
        resource = f"{prefix}:{n % 10}"
        if raw.execute(acquire, (resource, prefix)).fetchone() is None:
            raise RuntimeError("the floor failed to acquire a free resource")
        raw.execute(release, (resource, prefix))

    return cycle
