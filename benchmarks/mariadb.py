"""MariaDB figures: uncontended cycles/s beside MariaDB's raw one-statement
floor, 8 processes contending for one resource, and purge of many rows.

    source scripts/mariadb-server.sh && mariadb_start
    DATABASE_URL=$DLOCK_MYSQL_URL python -m benchmarks.mariadb

Speeds are ratios measured side by side (interleaved rounds, medians): the
machine is shared and noisy.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks import acquire
from benchmarks.acquire import configure
from benchmarks.contenders import FLOOR_TABLE

PROCESSES = int(os.environ.get("BENCH_PROCESSES", "8"))
CONTENTION_SECONDS = float(os.environ.get("BENCH_CONTENTION_SECONDS", "10"))
PURGE_ROWS = int(os.environ.get("BENCH_PURGE_ROWS", "1000000"))


FLOOR_COLUMNS = (
    "resource varchar(255) COLLATE utf8mb4_bin PRIMARY KEY, owner varchar(255) NOT NULL, "
    "expires_at datetime(6) NOT NULL, fencing_token bigint NOT NULL"
)


def floor_sql() -> tuple[str, str]:
    """MariaDB's one-statement acquire (insert, or take over an expired row) and
    release (delete), on a table of ``FLOOR_COLUMNS``."""
    takes = "(expires_at <= UTC_TIMESTAMP(6) OR owner = VALUES(owner))"
    acquire = (
        f"INSERT INTO {FLOOR_TABLE} (resource, owner, expires_at, fencing_token) "
        "VALUES (%s, %s, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, 1) ON DUPLICATE KEY UPDATE "
        f"fencing_token = IF({takes}, fencing_token + 1, fencing_token), "
        f"expires_at = IF({takes}, VALUES(expires_at), expires_at), "
        f"owner = IF({takes}, VALUES(owner), owner)"
    )
    release = f"DELETE FROM {FLOOR_TABLE} WHERE resource = %s AND owner = %s"
    return acquire, release


def mariadb_floor_cycle_factory() -> Callable[[int], None]:
    """MariaDB's floor for benchmarks.acquire, on the default database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_TABLE}")
        cursor.execute(f"CREATE TABLE {FLOOR_TABLE} ({FLOOR_COLUMNS}) ENGINE=InnoDB")
    return django_floor("default")("job")


def django_floor(alias: str) -> Callable[[str], Callable[[int], None]]:
    """``floor_sql()`` in autocommit through Django's cursor on ``alias``: cycles
    of ``{prefix}:{n % 10}``."""

    def make(prefix: str) -> Callable[[int], None]:
        from django.db import connections

        acquire, release = floor_sql()

        def cycle(n: int) -> None:
            resource = f"{prefix}:{n % 10}"
            with connections[alias].cursor() as cursor:
                cursor.execute(acquire, (resource, prefix))
                cursor.execute(release, (resource, prefix))

        return cycle

    return make


def contend(url: str, seconds: float, start: Any, results: Any) -> None:
    """Acquire and release one resource in a loop for ``seconds``, polling with
    a short random pause when it is held; put how many turns this process got."""
    import random

    os.environ["DATABASE_URL"] = url
    configure()
    from django_dlock.models import DistributedLock

    owner = f"bench-{os.getpid()}"
    turns = 0
    start.wait()
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if DistributedLock.objects.acquire("bench:contended", owner=owner, ttl=30) is None:
            time.sleep(random.uniform(0, 0.002))
            continue
        turns += 1
        DistributedLock.objects.release("bench:contended", owner=owner)
    results.put(turns)


def contention() -> None:
    spawn = multiprocessing.get_context("spawn")
    start, results = spawn.Barrier(PROCESSES), spawn.Queue()
    url = os.environ["DATABASE_URL"]
    processes = [
        spawn.Process(target=contend, args=(url, CONTENTION_SECONDS, start, results))
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    turns = sorted(results.get(timeout=CONTENTION_SECONDS + 120) for _ in processes)
    for process in processes:
        process.join(timeout=30)
    total = sum(turns)
    # Jain's fairness index: 1.0 when every process got the same share.
    jain = total**2 / (len(turns) * sum(t * t for t in turns)) if total else 0.0
    print(
        f"{PROCESSES} processes, one resource, {CONTENTION_SECONDS:.0f} s (try, then poll 0-2 ms):"
    )
    print(f"  {total / CONTENTION_SECONDS:.0f} acquisitions/s in all; per process {turns}")
    print(f"  fairness (Jain's index) {jain:.3f}; fewest/most {turns[0]}/{turns[-1]}")


def purge() -> None:
    from django.db import connection

    from django_dlock.models import DistributedLock

    DistributedLock.objects.all().delete()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        # MariaDB's sequence engine: seq_1_to_N is a table of N numbers.
        cursor.execute(
            "INSERT INTO distributed_locks (resource, owner, acquired_at, expires_at, fencing_token) "
            "SELECT CONCAT('purge:', seq), 'bench', UTC_TIMESTAMP(6) - INTERVAL 2 HOUR, "
            f"UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, seq FROM seq_1_to_{PURGE_ROWS}"
        )
    filled = time.perf_counter() - started
    started = time.perf_counter()
    deleted = DistributedLock.objects.purge_expired(batch_size=10_000)
    took = time.perf_counter() - started
    print(f"purge of {PURGE_ROWS} expired rows (filled in {filled:.1f} s), batches of 10000:")
    print(f"  deleted {deleted} in {took:.1f} s: {deleted / took:.0f} rows/s")


def main() -> None:
    acquire.main()  # configures Django and migrates; uncontended cycles beside the floor
    contention()
    purge()


if __name__ == "__main__":
    main()
