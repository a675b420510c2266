"""Acquire + release cycles: django-dlock beside the raw-SQL floor, in client
CPU and wall time per cycle.

    DATABASE_URL=postgres://... python -m benchmarks.acquire   # or sqlite:////tmp/bench.sqlite3
    python -m benchmarks.acquire --compare ../before --profile  # beside another checkout's code

The floor is what one round trip per operation costs: a one-statement upsert to
acquire and a one-statement delete to release, in autocommit, on a table of the
same shape (prepared by psycopg on PostgreSQL). Beside it: the manager's
``acquire`` and ``release``, and ``with lock(...)``. Every variant runs in the
same process, interleaved in rounds, and the median round counts: the machine is
shared and noisy, the ratios hold better than any absolute figure. On a
PostgreSQL with cheap commits (``synchronous_commit=off``) the client's CPU
decides the speed; ``docs/performance.md`` ("The client's CPU") has the figures.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import django
from django.conf import settings

from benchmarks.checkout import OtherCheckout
from benchmarks.contenders import (
    FLOOR_TABLE,
    Cycle,
    _floor_cycle,
    _floor_sql,
    postgres_four_statements,
)

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


FLOOR = "raw one-statement SQL, autocommit (floor)"
FOUR_STATEMENTS = "raw 4-statement transactions, no Django"
MANAGER = "django-dlock acquire + release"
WITH_LOCK = "django-dlock with lock()"
RUNNABLE = {"floor": FLOOR, "manager": MANAGER, "lock": WITH_LOCK}  # --run's choices


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


def floor_cycle_factory() -> Cycle:
    """One-statement acquire (upsert) and release (delete), autocommit; on
    PostgreSQL psycopg prepares them after their fifth run, as the floor of
    ``benchmarks.contenders``."""
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
        acquire, release = _floor_sql("now()", "now() + interval '30 seconds'")
    else:
        import sqlite3

        raw = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None, timeout=20)
        raw.execute("PRAGMA journal_mode=WAL")
        acquire, release = (
            sql.replace("%s", "?")
            for sql in _floor_sql("datetime('now')", "datetime('now', '+30 seconds')")
        )
    return _floor_cycle(raw, acquire, release, "job")


def four_statement_cycle_factory() -> Cycle:
    """What django-dlock's portable design costs without Django: BEGIN, SELECT
    ... FOR UPDATE, UPDATE, COMMIT per operation, by hand on the floor's table."""
    from django.db import connection

    return postgres_four_statements(connection.settings_dict)("job")


def dlock_cycles(prefix: str) -> dict[str, Cycle]:
    """django-dlock's cycles on ``{prefix}:{n % 10}``: the manager's calls, and
    ``with lock(...)``."""
    from django_dlock import lock
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects

    def manager_cycle(n: int) -> None:
        resource = f"{prefix}:{n % 10}"
        if locks.acquire(resource, owner="bench", ttl=30) is None:
            raise RuntimeError("django-dlock failed to acquire a free resource")
        locks.release(resource, owner="bench")

    def lock_cycle(n: int) -> None:
        with lock(f"{prefix}-with:{n % 10}", ttl=30):
            pass

    return {MANAGER: manager_cycle, WITH_LOCK: lock_cycle}


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


def per_cycle(cycle: Cycle, cycles: int) -> tuple[float, float]:
    """Client CPU (``time.process_time``) and wall seconds per cycle, over ``cycles`` cycles."""
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(cycles):
        cycle(n)
    return (time.process_time() - cpu) / cycles, (time.perf_counter() - wall) / cycles


def install_metrics() -> None:
    """Feed django-dlock's Prometheus metrics (in a registry of their own) from its
    signals, as a project that installs them does."""
    from prometheus_client import CollectorRegistry

    from django_dlock.contrib.prometheus import LockMetrics

    LockMetrics(CollectorRegistry()).connect()


def profile(name: str, cycle: Cycle, cycles: int, top: int = 25) -> None:
    """The ``top`` functions by client CPU (their own, not their callees') over ``cycles`` cycles."""
    profiler = cProfile.Profile(time.process_time)
    profiler.runcall(lambda: [cycle(n) for n in range(cycles)])
    print(f"\ncProfile of {name!r}, {cycles} cycles, client CPU (process_time), top {top}:")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.acquire", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--cycles", type=int, default=CYCLES, help="per variant and round")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="CHECKOUT",
        help="also django-dlock as another checkout has it (a directory), in a process of its "
        "own, its rounds interleaved with these",
    )
    parser.add_argument(
        "--metrics", action="store_true", help="with the Prometheus metrics installed"
    )
    parser.add_argument(
        "--profile", action="store_true", help="then a cProfile of each django-dlock variant"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="also write the table, as the key 'acquire' of this JSON file (added to what it "
        "holds: scripts/benchmark.sh adds it to docs/benchmark.json)",
    )
    parser.add_argument(
        "--run",
        choices=sorted(RUNNABLE),
        help="only CYCLES cycles of this variant, after 100 to warm up, and no output: to count "
        "its instructions under valgrind (the difference of two runs with different CYCLES)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    configure()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    if args.metrics:
        install_metrics()
    if args.run:
        name = RUNNABLE[args.run]
        cycle = floor_cycle_factory() if name == FLOOR else dlock_cycles("job")[name]
        for n in range(100 + args.cycles):
            cycle(n)
        return
    variants: dict[str, Cycle] = {FLOOR: floor_cycle_factory()}
    if connection.vendor == "postgresql":
        variants[FOUR_STATEMENTS] = four_statement_cycle_factory()
    variants.update(dlock_cycles("job"))
    other = OtherCheckout(args.compare, metrics=args.metrics) if args.compare else None
    for cycle in variants.values():
        for n in range(50):
            cycle(n)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, cycle in variants.items():
            samples[name].append(per_cycle(cycle, args.cycles))
        if other is not None:
            for name, sample in other.round(args.cycles).items():
                samples.setdefault(name, []).append(sample)
    if other is not None:
        other.close()
    version = ".".join(map(str, connection.get_database_version()))
    print(f"database: {connection.vendor} {version}", end="")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('synchronous_commit')")
            print(f", synchronous_commit {cursor.fetchone()[0]}", end="")
    print(f"; metrics {'installed' if args.metrics else 'not installed'}")
    print_table(samples, args.rounds, args.cycles)
    if args.json:
        add_to_json(args.json, summary(samples, args.rounds, args.cycles))
    if other is not None:
        print_paired(samples, other.label)
    print("statements per operation (BEGIN and COMMIT included):")
    for name, count in statements_per_operation().items():
        print(f"  {name:<44} {count:>9}")
    if args.profile:
        for name, cycle in dlock_cycles("job").items():
            profile(name, cycle, args.cycles * 4)
    sys.stdout.flush()


def serve(*, metrics: bool) -> None:
    """The child of ``benchmarks.checkout.OtherCheckout``: django-dlock's cycles
    (of the django_dlock this process imports), one round per request read from
    stdin, each answered on stdout."""
    configure()
    if metrics:
        install_metrics()
    cycles = dlock_cycles("other")
    for cycle in cycles.values():
        for n in range(50):
            cycle(n)
    print(json.dumps(list(cycles)), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(per_cycle(cycles[request["name"]], request["cycles"])), flush=True)


def print_table(samples: dict[str, list[tuple[float, float]]], rounds: int, cycles: int) -> None:
    """Median and range of the rounds, per cycle; the ratios are the medians' to the floor's."""
    floor_cpu = statistics.median(cpu for cpu, _ in samples[FLOOR])
    floor_wall = statistics.median(wall for _, wall in samples[FLOOR])
    print(f"{rounds} rounds of {cycles} acquire + release cycles, interleaved; per cycle,")
    print("median round [range], in ms; cycles/s and client CPU as multiples of the floor's:")
    print(f"  {'variant':<44} {'client CPU':>19} {'wall':>19} {'x floor':>7} {'CPU x':>6}")
    for name, runs in samples.items():
        cpus, walls = [cpu * 1000 for cpu, _ in runs], [wall * 1000 for _, wall in runs]
        cpu, wall = statistics.median(cpus), statistics.median(walls)
        print(
            f"  {name:<44} {cpu:6.3f} [{min(cpus):.3f}-{max(cpus):.3f}] "
            f"{wall:6.3f} [{min(walls):.3f}-{max(walls):.3f}] "
            f"{floor_wall * 1000 / wall:>7.2f} {cpu / (floor_cpu * 1000):>6.1f}"
        )


def summary(
    samples: dict[str, list[tuple[float, float]]], rounds: int, cycles: int
) -> dict[str, Any]:
    """The table as data: each variant's median client CPU and wall time per
    cycle (ms), and their multiples of the floor's (cycles/s: x floor)."""
    from django.db import connection

    floor_cpu = statistics.median(cpu for cpu, _ in samples[FLOOR])
    floor_wall = statistics.median(wall for _, wall in samples[FLOOR])
    setting = ""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('synchronous_commit')")
            setting = cursor.fetchone()[0]
    variants = {}
    for name, runs in samples.items():
        cpu = statistics.median(cpu for cpu, _ in runs)
        wall = statistics.median(wall for _, wall in runs)
        variants[name] = {
            "client_cpu_ms": round(cpu * 1000, 4),
            "wall_ms": round(wall * 1000, 4),
            "x_floor": round(floor_wall / wall, 3),
            "client_cpu_x_floor": round(cpu / floor_cpu, 2),
        }
    return {
        "database": connection.vendor,
        "synchronous_commit": setting,
        "rounds": rounds,
        "cycles": cycles,
        "variants": variants,
    }


def add_to_json(path: Path, table: dict[str, Any]) -> None:
    """``table`` as the key ``acquire`` of the JSON object in ``path`` (made if missing)."""
    results = json.loads(path.read_text()) if path.exists() else {}
    results["acquire"] = table
    path.write_text(json.dumps(results, indent=1) + "\n")


def print_paired(samples: dict[str, list[tuple[float, float]]], label: str) -> None:
    """Each variant beside the other checkout's, round by round (the rounds ran
    next to each other, so their ratio holds better than the medians')."""
    print(f"beside {label}, the ratio of each round to its twin: median [range]")
    print(f"  {'variant':<44} {'client CPU':>19} {'wall':>19}")
    for name in (MANAGER, WITH_LOCK):
        twin = samples.get(f"{name} [{label}]")
        if twin is None:
            continue
        cpus = [a[0] / b[0] for a, b in zip(samples[name], twin, strict=True)]
        walls = [a[1] / b[1] for a, b in zip(samples[name], twin, strict=True)]
        print(
            f"  {name:<44} {statistics.median(cpus):6.2f} [{min(cpus):.2f}-{max(cpus):.2f}] "
            f"{statistics.median(walls):6.2f} [{min(walls):.2f}-{max(walls):.2f}]"
        )


if __name__ == "__main__":
    main()
