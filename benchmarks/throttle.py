"""One throttle use beside its one-upsert floor and Redis's limiters (issue 46).

    source scripts/pg-cluster.sh && pg_cluster_start
    source scripts/mariadb-server.sh && mariadb_start
    python -m benchmarks.throttle [--quick] [--json PATH]

On each database of ``benchmarks.kinds_setup`` (PostgreSQL, SQLite in WAL
mode, MariaDB), one client, in interleaved rounds:

- **floor**: a table of the throttle table's shape (``key``, ``slot``,
  ``used_at``, ``free_at``, ``rate``, ``ring``, ``refused_at``; unique on key
  and slot, an index on ``free_at``) and one upsert per use, ``RETURNING`` its id, through the raw
  driver in autocommit (psycopg prepares it; sqlite3; MySQLdb);
- **throttle()**: ``with throttle(key, rate="1000/s")`` (never refused);

each over 1,000 keys taken in turn. Beside them, Redis's limiters as Python
projects write them (``benchmarks.features_redis``), on a redis-server the
benchmark starts and stops: a fixed window (``INCR`` + ``EXPIRE`` in one
pipeline: up to twice the limit within one period) and a sliding window (a
sorted set in one Lua script: exact, as ``throttle()`` is). Per contender:
uses a second (the median round), the client's CPU per use, and for
``throttle()`` the median of the rounds' ratios to its floor (goal: 0.5x).

Nothing is written unless ``--json PATH`` is given (never docs/benchmark.json
by accident). The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import features_redis, kinds_setup
from benchmarks.contenders import Cycle, psycopg_connect
from benchmarks.setup import RedisServer

KEYS = 1000
RATE = "1000/s"
TABLE = "bench_throttle_floor"
FLOOR, DLOCK = "floor: one upsert", 'with throttle(key, rate="1000/s")'

_COLUMNS = {
    "postgresql": "id bigserial PRIMARY KEY, key varchar(255) NOT NULL, slot integer NOT NULL, "
    "used_at timestamptz, free_at timestamptz, rate varchar(64) NOT NULL, ring text NOT NULL, "
    "refused_at timestamptz, UNIQUE (key, slot)",
    "sqlite": "id integer NOT NULL PRIMARY KEY AUTOINCREMENT, key varchar(255) NOT NULL, "
    "slot integer NOT NULL, used_at datetime, free_at datetime, rate varchar(64) NOT NULL, "
    "ring text NOT NULL, refused_at datetime, UNIQUE (key, slot)",
    "mariadb": "id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, "
    "`key` varchar(255) COLLATE utf8mb4_bin NOT NULL, slot integer NOT NULL, "
    "used_at datetime(6), free_at datetime(6), rate varchar(64) NOT NULL, "
    "ring longtext NOT NULL, refused_at datetime(6), UNIQUE (`key`, slot)",
}
_UPSERT = {
    "postgresql": f"INSERT INTO {TABLE} (key, slot, used_at, free_at, rate, ring) "
    "VALUES (%s, 0, now(), now() + interval '1 second', %s, '') ON CONFLICT (key, slot) "
    "DO UPDATE SET used_at = EXCLUDED.used_at, free_at = EXCLUDED.free_at RETURNING id",
    "sqlite": f"INSERT INTO {TABLE} (key, slot, used_at, free_at, rate, ring) "
    "VALUES (?, 0, datetime('now'), datetime('now', '+1 seconds'), ?, '') "
    "ON CONFLICT (key, slot) DO UPDATE SET used_at = excluded.used_at, "
    "free_at = excluded.free_at RETURNING id",
    "mariadb": f"INSERT INTO {TABLE} (`key`, slot, used_at, free_at, rate, ring) "
    "VALUES (%s, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 SECOND, %s, '') "
    "ON DUPLICATE KEY UPDATE used_at = VALUES(used_at), free_at = VALUES(free_at) RETURNING id",
}


def floor(alias: str, prefix: str) -> Cycle:
    """The floor's cycle on ``alias``: one upsert of key ``n % KEYS``."""
    from django.db import connections

    settings_dict = connections[alias].settings_dict
    sql = _UPSERT[alias]
    if alias == "postgresql":
        raw = psycopg_connect(dict(settings_dict))
        return lambda n: raw.execute(sql, (f"{prefix}:{n % KEYS}", RATE), prepare=True).fetchone()
    if alias == "sqlite":
        import sqlite3

        lite = sqlite3.connect(settings_dict["NAME"], isolation_level=None, timeout=20)
        lite.execute("PRAGMA journal_mode=WAL")
        return lambda n: lite.execute(sql, (f"{prefix}:{n % KEYS}", RATE)).fetchone()
    maria = kinds_setup.mariadb_connection(dict(settings_dict))

    def cycle(n: int) -> None:
        with maria.cursor() as cursor:
            cursor.execute(sql, (f"{prefix}:{n % KEYS}", RATE))
            cursor.fetchone()

    return cycle


def dlock(alias: str, prefix: str) -> Cycle:
    from django_dlock import throttle

    def cycle(n: int) -> None:
        with throttle(f"{prefix}:{n % KEYS}", rate=RATE, using=alias):
            pass

    return cycle


def redis(port: int, name: str, prefix: str) -> Cycle:
    use = features_redis.LIMITERS[name](port, 1000, 1.0)

    def cycle(n: int) -> None:
        granted, _ = use(f"{prefix}:{n % KEYS}")
        if not granted:
            raise RuntimeError(f"{name} refused a use")

    return cycle


def create_floor_table(alias: str) -> None:
    from django.db import connections

    engine = " ENGINE=InnoDB" if alias == "mariadb" else ""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cursor.execute(f"CREATE TABLE {TABLE} ({_COLUMNS[alias]}){engine}")
        # The throttle table's index for the purge: an upsert writes free_at,
        # so no update of either table is HOT on PostgreSQL.
        cursor.execute(f"CREATE INDEX {TABLE}_free ON {TABLE} (free_at)")


def measure(cycle: Cycle, seconds: float) -> tuple[float, float]:
    """(uses a second, client CPU microseconds a use) of ``cycle`` run for ``seconds``."""
    n, wall, cpu = 0, time.perf_counter(), time.process_time()
    deadline = wall + seconds
    while True:
        for _ in range(50):
            cycle(n)
            n += 1
        now = time.perf_counter()
        if now >= deadline:
            break
    return n / (now - wall), (time.process_time() - cpu) / n * 1e6


def run(aliases: list[str], port: int, rounds: int, seconds: float) -> list[dict[str, Any]]:
    makers: dict[tuple[str, str], Callable[[str], Cycle]] = {}
    for alias in aliases:
        create_floor_table(alias)
        makers[(alias, FLOOR)] = functools.partial(floor, alias)
        makers[(alias, DLOCK)] = functools.partial(dlock, alias)
    for name in features_redis.LIMITERS:
        makers[("redis", name)] = functools.partial(redis, port, name)
    cycles = {}
    for index, (key, make) in enumerate(makers.items()):
        cycles[key] = make(f"t{index}-{os.getpid()}")
        for n in range(2 * KEYS):  # connections, prepared statements, every key's row
            cycles[key](n)
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in cycles}
    for number in range(rounds):
        print(f"  throttle: round {number + 1}/{rounds}", file=sys.stderr)
        for key, cycle in cycles.items():
            runs[key].append(measure(cycle, seconds))
    results = []
    for (database, name), measured in runs.items():
        entry: dict[str, Any] = {
            "database": database,
            "contender": name,
            "uses_per_second": statistics.median(rate for rate, _ in measured),
            "client_cpu_us": statistics.median(cpu for _, cpu in measured),
            "rounds": [round(rate) for rate, _ in measured],
        }
        if name == DLOCK:
            floors = runs[(database, FLOOR)]
            ratios = [mine[0] / its[0] for mine, its in zip(measured, floors, strict=True)]
            entry["ratio_to_floor"] = statistics.median(ratios)
        results.append(entry)
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| database | contender | uses/s | client CPU µs/use | ratio to its floor |",
        "| --- | --- | --- | --- | --- |",
    ]
    for entry in results:
        ratio = entry.get("ratio_to_floor")
        lines.append(
            f"| {kinds_setup.LABELS.get(entry['database'], 'Redis')} | {entry['contender']} "
            f"| {entry['uses_per_second']:,.0f} | {entry['client_cpu_us']:,.0f} "
            f"| {'' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds of 1 s (else 7 of 3 s)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    rounds, seconds = (3, 1.0) if args.quick else (7, 3.0)
    aliases = kinds_setup.configure()
    kinds_setup.migrate(aliases)
    print(f"load average at the start: {os.getloadavg()}")
    with RedisServer() as server:
        results = run(aliases, server.port, rounds, seconds)
    print(f"load average at the end: {os.getloadavg()}")
    versions = ", ".join(kinds_setup.version(alias) for alias in aliases)
    print(f"\nOne throttle use over {KEYS:,} keys, one client ({versions}):\n")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"throttle": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
