"""The floor of ``benchmarks.floor`` and what it is measured beside.

The floor is a table of the lock table's shape (``distributed_locks``: a
64-bit serial id, a unique resource, owner, acquired_at, expires_at, fencing
token) used through the database's raw driver in autocommit: one upsert to
acquire (it takes the row when it is expired or already the owner's, and
returns its id) and one delete to release. On PostgreSQL psycopg 3 prepares
both after their fifth run. Every contender takes its names in turn from a
list (1,000 by default): a row is used again only after all the others, as in
an application with many resources, not the same few rows deleted and
inserted again and again, whose dead tuples make the floor's server work
heavier than an application's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Cycle = Callable[[int], object]  # as benchmarks.contenders' cycles

TABLE = "bench_floor"
NAMES = 1000
TTL = 30
OWNER = "bench"

_COLUMNS = {
    "postgresql": (
        "id bigserial PRIMARY KEY, resource varchar(255) NOT NULL UNIQUE, "
        "owner varchar(255) NOT NULL, acquired_at timestamptz NOT NULL, "
        "expires_at timestamptz NOT NULL, fencing_token bigint NOT NULL"
    ),
    # Django's BigAutoField on SQLite: the rowid, never reused (AUTOINCREMENT).
    "sqlite": (
        "id integer NOT NULL PRIMARY KEY AUTOINCREMENT, resource varchar(255) NOT NULL UNIQUE, "
        "owner varchar(255) NOT NULL, acquired_at datetime NOT NULL, "
        "expires_at datetime NOT NULL, fencing_token bigint NOT NULL"
    ),
    # Binary collation: resource names compare as the lock table's do.
    "mysql": (
        "id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "resource varchar(255) COLLATE utf8mb4_bin NOT NULL UNIQUE, "
        "owner varchar(255) NOT NULL, acquired_at datetime(6) NOT NULL, "
        "expires_at datetime(6) NOT NULL, fencing_token bigint NOT NULL"
    ),
}


def names(prefix: str, count: int = NAMES) -> list[str]:
    return [f"{prefix}:{n}" for n in range(count)]


def share(all_names: Sequence[str], index: int, clients: int) -> list[str]:
    """Client ``index``'s names of ``clients`` sharing ``all_names``: every
    ``clients``-th one, so that the clients together still take each name in turn."""
    if not 0 <= index < clients:
        raise ValueError(f"client {index} of {clients}")
    return list(all_names[index::clients])


def create_table(vendor: str, cursor: Any) -> None:
    cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
    engine = " ENGINE=InnoDB" if vendor == "mysql" else ""
    cursor.execute(f"CREATE TABLE {TABLE} ({_COLUMNS[vendor]}){engine}")


def statements(vendor: str) -> tuple[str, str]:
    """(acquire, release) of ``vendor``, with the resource and owner as parameters."""
    release = f"DELETE FROM {TABLE} WHERE resource = %s AND owner = %s"
    if vendor == "mysql":
        # No RETURNING with ON DUPLICATE KEY UPDATE: the affected-rows count
        # says whether the row was inserted or taken.
        takes = "(expires_at <= UTC_TIMESTAMP(6) OR owner = VALUES(owner))"
        acquire = (
            f"INSERT INTO {TABLE} (resource, owner, acquired_at, expires_at, fencing_token) "
            f"VALUES (%s, %s, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL {TTL} SECOND, 1) "
            f"ON DUPLICATE KEY UPDATE fencing_token = IF({takes}, fencing_token + 1, fencing_token), "
            f"acquired_at = IF({takes}, VALUES(acquired_at), acquired_at), "
            f"expires_at = IF({takes}, VALUES(expires_at), expires_at), "
            f"owner = IF({takes}, VALUES(owner), owner)"
        )
        return acquire, release
    if vendor == "postgresql":
        now, expires = "now()", f"now() + interval '{TTL} seconds'"
    else:
        now = "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        expires = f"strftime('%Y-%m-%d %H:%M:%f', 'now', '+{TTL} seconds')"
    acquire = (
        f"INSERT INTO {TABLE} (resource, owner, acquired_at, expires_at, fencing_token) "
        f"VALUES (%s, %s, {now}, {expires}, 1) ON CONFLICT (resource) DO UPDATE SET "
        "owner = excluded.owner, acquired_at = excluded.acquired_at, "
        f"expires_at = excluded.expires_at, fencing_token = {TABLE}.fencing_token + 1 "
        f"WHERE {TABLE}.expires_at <= {now} OR {TABLE}.owner = excluded.owner RETURNING id"
    )
    if vendor == "sqlite":
        # sqlite3's placeholders (strftime's format has no "%s" in it).
        return acquire.replace("%s", "?"), release.replace("%s", "?")
    return acquire, release


def postgres_connection(settings: dict[str, Any], *, fast: bool = False) -> Any:
    """A psycopg 3 connection in autocommit to ``settings``' server; ``fast``:
    with ``synchronous_commit`` off for its session."""
    import psycopg

    return psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        dbname=settings["NAME"],
        password=settings["PASSWORD"] or None,
        autocommit=True,
        options="-c synchronous_commit=off" if fast else "",
    )


def sqlite_connection(path: str) -> Any:
    import sqlite3

    connection = sqlite3.connect(path, isolation_level=None, timeout=20)
    connection.execute("PRAGMA journal_mode=WAL")
    return connection


def mariadb_connection(settings: dict[str, Any]) -> Any:
    from benchmarks.kinds_setup import mariadb_connection as connect

    return connect(settings)


def raw_cycle(vendor: str, connection: Any, resources: Sequence[str], owner: str) -> Cycle:
    """The floor's acquire + release of ``resources[n % len(resources)]`` on ``connection``."""
    acquire, release = statements(vendor)
    if vendor == "mysql":

        def cursor_cycle(n: int) -> None:
            resource = resources[n % len(resources)]
            with connection.cursor() as cursor:
                # 1 a row inserted, 2 a row taken, 0 a row left as it was.
                if cursor.execute(acquire, (resource, owner)) == 0:
                    raise RuntimeError("the floor failed to acquire a free resource")
                cursor.execute(release, (resource, owner))

        return cursor_cycle

    def cycle(n: int) -> None:
        resource = resources[n % len(resources)]
        if connection.execute(acquire, (resource, owner)).fetchone() is None:
            raise RuntimeError("the floor failed to acquire a free resource")
        connection.execute(release, (resource, owner))

    return cycle


def manager_cycle(alias: str, resources: Sequence[str], owner: str) -> Cycle:
    """``DistributedLock.objects.acquire(name, owner=..., ttl=30)`` and ``release``."""
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects.db_manager(alias)

    def cycle(n: int) -> None:
        resource = resources[n % len(resources)]
        if locks.acquire(resource, owner=owner, ttl=TTL) is None:
            raise RuntimeError("django-dlock failed to acquire a free resource")
        locks.release(resource, owner=owner)

    return cycle


def lock_cycle(alias: str, resources: Sequence[str], owner: str) -> Cycle:
    """``with lock(name, owner=..., ttl=30)``."""
    from django_dlock import lock

    def cycle(n: int) -> None:
        with lock(resources[n % len(resources)], owner=owner, ttl=TTL, using=alias):
            pass

    return cycle


def client_maker(
    make: Callable[[Sequence[str]], Cycle], all_names: Sequence[str], clients: int
) -> Callable[[str], Cycle]:
    """For ``benchmarks.clients.throughput``, which names its processes
    ``c0``, ``c1``...: each process's cycle on its share of ``all_names``."""

    def for_process(prefix: str) -> Cycle:
        return make(share(all_names, int(prefix.removeprefix("c")), clients))

    return for_process


def client_makers(
    settings: dict[str, Any], alias: str, all_names: Sequence[str], clients: int
) -> dict[str, Callable[[str], Cycle]]:
    """The PostgreSQL floor and the manager for ``clients`` processes sharing
    ``all_names`` (whose lock rows the manager should have made beforehand, as
    an application's exist)."""
    return {
        "floor": client_maker(
            lambda resources: raw_cycle(
                "postgresql", postgres_connection(settings), resources, OWNER
            ),
            all_names,
            clients,
        ),
        "django-dlock": client_maker(
            lambda resources: manager_cycle(alias, resources, OWNER), all_names, clients
        ),
    }
