"""Acquire + release cycles per second: django-dlock beside the raw-SQL floor.

    DATABASE_URL=postgres://... python -m benchmarks.acquire   # or sqlite:////tmp/bench.sqlite3
    bash scripts/benchmark.sh                                   # both, on a throwaway cluster

The floor is what one round trip per operation costs: a one-statement upsert to
acquire and a one-statement delete to release, in autocommit, on a table of the
same shape. Both run in the same process, interleaved in rounds, and the median
round counts: the machine is shared and noisy, the ratio holds better than either.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import django
from django.conf import settings

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "7"))
CYCLES = int(os.environ.get("BENCH_CYCLES", "500"))


def configure() -> None:
    import dj_database_url

    url = os.environ.get("DATABASE_URL") or f"sqlite:///{tempfile.mkdtemp()}/bench.sqlite3"
    database = dj_database_url.parse(url)
    if database["ENGINE"].endswith("sqlite3"):
        database["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}
        # WAL, as the SQLite floor in MEASURED.md was measured.
        database["OPTIONS"]["init_command"] = "PRAGMA journal_mode=WAL"
    settings.configure(
        DATABASES={"default": database},
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_dlock"],
        USE_TZ=True,
    )
    django.setup()


FLOOR_TABLE = "bench_floor_locks"


def psycopg_connection(*, autocommit: bool) -> Any:
    """A plain psycopg connection to the database Django uses."""
    import psycopg
    from django.db import connection

    s = connection.settings_dict
    return psycopg.connect(
        host=s["HOST"],
        port=s["PORT"],
        user=s["USER"],
        dbname=s["NAME"],
        password=s["PASSWORD"] or None,
        autocommit=autocommit,
    )


def floor_cycle_factory() -> Callable[[int], None]:
    """One-statement acquire (upsert) and release (delete), autocommit."""
    from django.db import connection

    vendor = connection.vendor
    if vendor == "mysql":
        from benchmarks.mariadb import mariadb_floor_cycle_factory

        return mariadb_floor_cycle_factory()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        cursor.execute(
            f"CREATE TABLE {FLOOR_TABLE} (resource varchar(255) PRIMARY KEY, "
            "owner varchar(255) NOT NULL, expires_at timestamp NOT NULL, fencing_token bigint NOT NULL)"
        )
    if vendor == "postgresql":
        raw = psycopg_connection(autocommit=True)
        now, plus = "now()", "now() + interval '30 seconds'"
    else:
        import sqlite3

        raw = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=20)
        raw.execute("PRAGMA journal_mode=WAL")
        now, plus = "datetime('now')", "datetime('now', '+30 seconds')"
    acquire = (
        f"INSERT INTO {FLOOR_TABLE} (resource, owner, expires_at, fencing_token) "
        f"VALUES (%s, %s, {plus}, 1) ON CONFLICT (resource) DO UPDATE SET owner = excluded.owner, "
        f"expires_at = excluded.expires_at, fencing_token = {FLOOR_TABLE}.fencing_token + 1 "
        f"WHERE {FLOOR_TABLE}.expires_at <= {now} OR {FLOOR_TABLE}.owner = excluded.owner "
        "RETURNING fencing_token"
    )
    release = f"DELETE FROM {FLOOR_TABLE} WHERE resource = %s AND owner = %s"
    if vendor == "sqlite":
        acquire, release = acquire.replace("%s", "?"), release.replace("%s", "?")

    def cycle(n: int) -> None:
        resource = f"job:{n % 10}"
        if raw.execute(acquire, (resource, "bench")).fetchone() is None:
            raise RuntimeError("the floor failed to acquire a free resource")
        raw.execute(release, (resource, "bench"))

    return cycle


def four_statement_cycle_factory() -> Callable[[int], None]:
    """What django-dlock's design costs without Django: BEGIN, SELECT ... FOR
    UPDATE, UPDATE, COMMIT per operation, by hand on the floor's table."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return lambda n: None
    raw = psycopg_connection(autocommit=False)
    select = (
        f"SELECT owner, expires_at, fencing_token, statement_timestamp() FROM {FLOOR_TABLE} "
        "WHERE resource = %s FOR UPDATE"
    )
    update = f"UPDATE {FLOOR_TABLE} SET owner = %s, expires_at = %s WHERE resource = %s"

    def operation(resource: str, owner: str, ttl: int) -> None:
        row = raw.execute(select, (resource,)).fetchone()
        if row is None:
            raw.execute(
                f"INSERT INTO {FLOOR_TABLE} VALUES (%s, %s, now(), 1)",
                (resource, owner),
            )
        else:
            raw.execute(update, (owner, row[3] + timedelta(seconds=ttl), resource))
        raw.commit()

    def cycle(n: int) -> None:
        resource = f"job:{n % 10}"
        operation(resource, "bench", 30)
        operation(resource, "", 0)

    return cycle


def dlock_cycle(n: int) -> None:
    from django_dlock.models import DistributedLock

    resource = f"job:{n % 10}"
    if DistributedLock.objects.acquire(resource, owner="bench", ttl=30) is None:
        raise RuntimeError("django-dlock failed to acquire a free resource")
    DistributedLock.objects.release(resource, owner="bench")


def statements_per_operation() -> dict[str, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_dlock.models import DistributedLock

    counts = {}
    operations: dict[str, Callable[[], object]] = {
        "acquire (new resource)": lambda: DistributedLock.objects.acquire("count:new", owner="a"),
        "acquire (released row)": lambda: DistributedLock.objects.acquire("job:0", owner="a"),
        "renew": lambda: DistributedLock.objects.renew("job:0", owner="a"),
        "release": lambda: DistributedLock.objects.release("job:0", owner="a"),
    }
    for name, operation in operations.items():
        with CaptureQueriesContext(connection) as queries:
            operation()
        counts[name] = len(queries.captured_queries)
    return counts


def cycles_per_second(cycle: Callable[[int], None]) -> float:
    started = time.perf_counter()
    for n in range(CYCLES):
        cycle(n)
    return CYCLES / (time.perf_counter() - started)


def main() -> None:
    configure()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    variants = {
        "raw one-statement SQL, autocommit (floor)": floor_cycle_factory(),
        "raw 4-statement transactions, no Django": four_statement_cycle_factory(),
        "django-dlock acquire + release": dlock_cycle,
    }
    if connection.vendor != "postgresql":
        del variants["raw 4-statement transactions, no Django"]
    for cycle in variants.values():
        for n in range(50):
            cycle(n)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, cycle in variants.items():
            rates[name].append(cycles_per_second(cycle))
    floor_rate = statistics.median(next(iter(rates.values())))
    print(f"database: {connection.vendor} {'.'.join(map(str, connection.get_database_version()))}")
    print(f"{ROUNDS} rounds of {CYCLES} acquire+release cycles, interleaved; median round:")
    print(f"  {'variant':<44} {'cycles/s':>9} {'x floor':>8}")
    for name, runs in rates.items():
        rate = statistics.median(runs)
        print(f"  {name:<44} {rate:>9.0f} {rate / floor_rate:>8.2f}")
    print("statements per operation (BEGIN and COMMIT included):")
    for name, count in statements_per_operation().items():
        print(f"  {name:<44} {count:>9}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
