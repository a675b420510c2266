"""Purging a million expired locks on PostgreSQL, side by side with the targets.

Not a test: it prints figures. Run it on a throwaway cluster with fsync on:

    PG_CLUSTER_OPTIONS=" " bash -c 'source scripts/pg-cluster.sh && pg_cluster_start \
        && python benchmarks/purge.py; pg_cluster_stop'

or point ``DATABASE_URL`` at a PostgreSQL server (a database ``dlock_bench`` is
dropped and created there). Measures, in one run:

- acquire latency on an empty table and with 1,000,000 rows in it (ratio),
- ``manage.py purge_locks`` on 1,000,000 expired rows: total time and the peak
  memory (max RSS) of the process that runs it,
- the worst latency of acquires that another process makes, in a loop, on other
  resources while the purge runs.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROWS = int(os.environ.get("BENCH_PURGE_ROWS", "1000000"))
BENCH_DB = "dlock_bench"
EMPTY_DB = "dlock_bench_empty"  # the same, without the million rows: the latency baseline
LATENCY_CYCLES = 3_000
TARGETS = {"purge_s": 2.0, "worst_acquire_ms": 20.0, "peak_mb": 100.0, "latency_ratio": 1.2}

spawn = get_context("spawn")


def setup_django() -> None:
    """Configure Django for ``BENCH_DB`` on the server of DATABASE_URL / DLOCK_PG_URL."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import dj_database_url
    import django
    from django.conf import settings

    url = os.environ.get("DATABASE_URL") or os.environ.get("DLOCK_PG_URL")
    if not url or not url.startswith("postgres"):
        sys.exit("Set DATABASE_URL (or DLOCK_PG_URL) to a PostgreSQL server; see the docstring.")
    database = dj_database_url.parse(url)
    settings.configure(
        DATABASES={
            "default": {**database, "NAME": BENCH_DB},
            "empty": {**database, "NAME": EMPTY_DB},
        },
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_dlock"],
        USE_TZ=True,
        TIME_ZONE="UTC",
        LOGGING_CONFIG=None,
    )
    django.setup()


def create_database() -> None:
    import dj_database_url
    import psycopg

    url = os.environ.get("DATABASE_URL") or os.environ.get("DLOCK_PG_URL") or ""
    server = dj_database_url.parse(url)
    with psycopg.connect(
        host=server["HOST"],
        port=server["PORT"] or 5432,
        user=server["USER"],
        password=server["PASSWORD"] or None,
        dbname=server["NAME"] or "postgres",
        autocommit=True,
    ) as connection:
        for name in (BENCH_DB, EMPTY_DB):
            connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
            connection.execute(f'CREATE DATABASE "{name}"')


def acquire_latencies(using: str, prefix: str, cycles: int) -> list[float]:
    """Seconds per acquire, over ``cycles`` acquire+release cycles on 100 resources
    (the first cycle of each inserts its row, the others update it)."""
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects.db_manager(using)
    latencies = []
    for n in range(cycles):
        name = f"{prefix}:{n % 100}"
        started = time.perf_counter()
        lock = locks.acquire(name, owner="bench", ttl=30)
        latencies.append(time.perf_counter() - started)
        if lock is None:
            raise RuntimeError(f"{name} was not acquired")
        locks.release(name, owner="bench")
    return latencies


def load_expired_rows(rows: int) -> float:
    from django.db import connection

    with connection.cursor() as cursor:  # a fresh table each time, as both purges get
        cursor.execute("TRUNCATE distributed_locks")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO distributed_locks (resource, owner, acquired_at, expires_at, fencing_token) "
            "SELECT 'expired:' || g, 'owner-' || g, now() - interval '2 hours', "
            "now() - interval '1 hour' + g * interval '1 ms', g "
            "FROM generate_series(1, %s) AS g",
            [rows],
        )
    loaded = time.perf_counter() - started
    with connection.cursor() as cursor:  # autocommit: VACUUM runs outside a transaction
        cursor.execute("VACUUM ANALYZE distributed_locks")
        cursor.execute("CHECKPOINT")  # the load's dirty pages are written before measuring
    return loaded


def reference_purge() -> float:
    """Seconds to purge the table in batches of 10,000 the way MEASURED.md timed
    (1.3 s there): ids by ``id = ANY(ARRAY(SELECT id ... LIMIT 10000))``, every
    deleted token sent back. Run here on the same machine at the same moment, it
    shows how busy the machine is."""
    from django.db import connection, transaction

    sql = (
        "DELETE FROM distributed_locks WHERE id = ANY(ARRAY("
        "SELECT id FROM distributed_locks WHERE expires_at <= now() LIMIT 10000)) "
        "AND expires_at <= now() RETURNING fencing_token"
    )
    started = time.perf_counter()
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
            tokens = [token for (token,) in cursor.fetchall()]
            if tokens:
                cursor.execute(
                    "UPDATE distributed_locks_fencing_floor SET value = GREATEST(value, %s)",
                    [max(tokens)],
                )
        if not tokens:
            return time.perf_counter() - started


def acquirer(ready: Any, stop: Any, results: Any) -> None:
    """Acquire and release 10 other resources in a loop until ``stop``; report latencies."""
    setup_django()
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects
    latencies: list[tuple[float, float]] = []  # (when it ended, seconds)
    n = 0
    while not stop.is_set():
        name = f"live:{n % 10}"
        started = time.perf_counter()
        lock = locks.acquire(name, owner="live", ttl=30)
        latencies.append((time.monotonic(), time.perf_counter() - started))
        if lock is None:
            raise RuntimeError(f"{name} was not acquired")
        locks.release(name, owner="live")
        n += 1
        if n == 200:
            ready.set()
    results.put(latencies[200:])


def purger(kind: str, results: Any) -> None:
    """Purge the table once, with ``manage.py purge_locks`` or the reference batching;
    report the time, this process's peak memory and what it said."""
    setup_django()
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    window_start = time.monotonic()  # system-wide clock: comparable across processes
    started = time.perf_counter()
    if kind == "command":
        call_command("purge_locks", stdout=out)
    else:
        reference_purge()
    elapsed = time.perf_counter() - started
    window_end = time.monotonic()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    results.put((elapsed, peak_kb, out.getvalue().strip(), window_start, window_end))


def run_purge(kind: str) -> dict[str, Any]:
    """One purge in a process of its own while another process acquires and
    releases other resources in a loop."""
    from django.db import connections

    connections.close_all()
    ready, stop, results = spawn.Event(), spawn.Event(), spawn.Queue()
    live = spawn.Process(target=acquirer, args=(ready, stop, results))
    live.start()
    if not ready.wait(60):
        sys.exit("the concurrent acquirer did not start")
    purge_results: Any = spawn.Queue()
    purge = spawn.Process(target=purger, args=(kind, purge_results))
    purge.start()
    seconds, peak_kb, summary, window_start, window_end = purge_results.get(timeout=600)
    purge.join()
    time.sleep(0.3)  # a few more acquires after the purge, for the baseline
    stop.set()
    acquires = results.get(timeout=60)
    live.join()
    # The acquires that ended while the purge ran (a blocked one ends late, so count it).
    window = (window_start, window_end + 0.05)
    during = [took for ended, took in acquires if window[0] <= ended <= window[1]]
    outside = [took for ended, took in acquires if not window[0] <= ended <= window[1]]
    return {
        "seconds": seconds,
        "peak_mb": peak_kb / 1024,
        "summary": summary,
        "during": during,
        "outside": outside,
    }


def main() -> None:
    create_database()
    setup_django()
    from django.core.management import call_command
    from django.db import connection, connections

    from django_dlock.models import DistributedLock, FencingFloor

    for alias in ("default", "empty"):
        call_command("migrate", "django_dlock", database=alias, verbosity=0)

    loaded_s = load_expired_rows(ROWS)
    # Latency with and without the million rows, in alternating rounds so that the
    # machine's noise falls on both alike.
    empty: list[float] = []
    full: list[float] = []
    rounds = 10
    for alias in ("empty", "default"):
        acquire_latencies(alias, "warm", 300)
    for n in range(rounds):
        empty += acquire_latencies("empty", f"r{n}", LATENCY_CYCLES // rounds)
        full += acquire_latencies("default", f"r{n}", LATENCY_CYCLES // rounds)
    connections.close_all()

    ours = run_purge("command")
    left = DistributedLock.objects.filter(resource__startswith="expired:").count()
    floor = FencingFloor.objects.get().value
    load_expired_rows(ROWS)
    reference = run_purge("reference")

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:.1f} ms"

    def p99(values: list[float]) -> float:
        return statistics.quantiles(values, n=100)[98]

    median_empty, median_full = statistics.median(empty), statistics.median(full)
    ratio = median_full / median_empty
    print(
        f"PostgreSQL {connection.get_database_version()[0]}, {ROWS:,} expired rows loaded in "
        f"{loaded_s:.1f} s; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"purge_locks said: {ours['summary']!r}; rows left: {left}; fencing floor: {floor:,}")
    print()
    print(
        "reference: the batching MEASURED.md timed at 1.3 s on an idle machine "
        "(id = ANY(ARRAY(SELECT id ...)), every token sent back), same run, same conditions"
    )
    print(f"{'figure':<46} {'purge_locks':>12} {'reference':>12} {'target':>10}")
    table: list[tuple[str, str, Callable[[dict[str, Any]], str], str]] = [
        (
            "purge of 1M expired rows (total)",
            "seconds",
            lambda r: f"{r['seconds']:.2f} s",
            f"<= {TARGETS['purge_s']} s",
        ),
        (
            "worst concurrent acquire during the purge",
            "during",
            lambda r: ms(max(r["during"])),
            f"<= {TARGETS['worst_acquire_ms']:.0f} ms",
        ),
        (
            "  p99 / median of those acquires",
            "during",
            lambda r: f"{p99(r['during']) * 1000:.1f}/{statistics.median(r['during']) * 1000:.1f}",
            "",
        ),
        (
            "  worst acquire before/after the purge",
            "outside",
            lambda r: ms(max(r["outside"])) if r["outside"] else "-",
            "",
        ),
        (
            "peak memory of the purge process (max RSS)",
            "peak_mb",
            lambda r: f"{r['peak_mb']:.1f} MB",
            f"< {TARGETS['peak_mb']:.0f} MB",
        ),
    ]
    for name, _, show, target in table:
        print(f"{name:<46} {show(ours):>12} {show(reference):>12} {target:>10}")
    print(
        f"{'acquire latency, 1M rows / empty (median)':<46} {ratio:>11.2f}x {'':>12} "
        f"{'<= ' + str(TARGETS['latency_ratio']) + 'x':>10}"
    )
    print()
    print(f"purge_locks / reference time: {ours['seconds'] / reference['seconds']:.2f}x")
    print(f"acquire latency, empty table:  median {ms(median_empty)}, p99 {ms(p99(empty))}")
    print(f"acquire latency, 1M rows:      median {ms(median_full)}, p99 {ms(p99(full))}")
    if "--json" in sys.argv:  # for python -m benchmarks
        figures = {
            "rows": ROWS,
            "median_empty_ms": median_empty * 1000,
            "median_full_ms": median_full * 1000,
            "p99_full_ms": p99(full) * 1000,
            "latency_ratio": ratio,
            "purge_s": ours["seconds"],
            "reference_purge_s": reference["seconds"],
            "worst_acquire_ms": max(ours["during"]) * 1000,
            "peak_mb": ours["peak_mb"],
        }
        Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
