"""One client, no other: a use of ``throttle()`` beside the raw one-statement
upsert and the Redis limiters; ``lock()`` with ``lock_delay``, ``min_hold``,
``until="commit"`` and ``once_per()`` beside the plain ``lock()`` they extend.

Every contender of every database runs in the same rounds, one after the
other (``run``), and a ratio is the median of the rounds' ratios
(``kinds_report.paired``): the machine is shared and noisy.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from benchmarks import features_redis, kinds_setup
from benchmarks.contenders import Cycle, _floor_sql, psycopg_connect
from benchmarks.single import measure_round

COUNTER_TABLE = "bench_features_counter"
KEYS = 100  # "never refused": this many keys used in turn, each far below its rate
RATE_LIMIT, RATE_PERIOD = 100, 1.0  # "100/s"
WIDE_LIMIT = 10_000  # "10000/s" on one key: never refused, the window holds every use


def throttle_scenarios() -> dict[str, tuple[int, int, float]]:
    """Scenario: (keys in turn, limit, period in seconds)."""
    return {
        f"{KEYS} keys in turn, {RATE_LIMIT}/s": (KEYS, RATE_LIMIT, RATE_PERIOD),
        f"one key, {RATE_LIMIT}/s (mostly refused)": (1, RATE_LIMIT, RATE_PERIOD),
        f"one key, {WIDE_LIMIT}/s (window of every use)": (1, WIDE_LIMIT, RATE_PERIOD),
    }


def _rate(limit: int, period: float) -> str:
    return f"{limit}/{int(period)}s"


def dlock_throttle(
    alias: str, keys: int, limit: int, period: float, refused: Counter[str]
) -> Callable[[str], Cycle]:
    from django_dlock import throttle

    def make(prefix: str) -> Cycle:
        rate = _rate(limit, period)

        def cycle(n: int) -> None:
            decision = throttle(f"{prefix}:{n % keys}", rate=rate, using=alias).try_use()
            refused[prefix] += not decision.granted
            refused[prefix + ":all"] += 1

        return cycle

    return make


def redis_throttle(
    port: int, name: str, keys: int, limit: int, period: float, refused: Counter[str]
) -> Callable[[str], Cycle]:
    def make(prefix: str) -> Cycle:
        use = features_redis.LIMITERS[name](port, limit, period)

        def cycle(n: int) -> None:
            granted, _ = use(f"{prefix}:{n % keys}")
            refused[prefix] += not granted
            refused[prefix + ":all"] += 1

        return cycle

    return make


def upsert_floor(alias: str) -> Callable[[str], Cycle]:
    """One statement per use, autocommit: the lock floor's upsert alone (by its
    own owner, so it always writes), as a counter of uses would be kept."""
    from django.db import connections

    settings_dict = dict(connections[alias].settings_dict)

    def make(prefix: str) -> Cycle:
        if alias == "postgresql":
            raw = psycopg_connect(settings_dict)
            upsert, _ = _floor_sql("now()", "now() + interval '30 seconds'")
            return lambda n: raw.execute(upsert, (f"{prefix}:{n % 10}", prefix))
        if alias == "sqlite":
            import sqlite3

            lite = sqlite3.connect(settings_dict["NAME"], isolation_level=None, timeout=20)
            lite.execute("PRAGMA journal_mode=WAL")
            sql, _ = _floor_sql("datetime('now')", "datetime('now', '+30 seconds')")
            upsert = sql.replace("%s", "?")
            return lambda n: lite.execute(upsert, (f"{prefix}:{n % 10}", prefix)).fetchall()
        from benchmarks.kinds_setup import mariadb_connection
        from benchmarks.mariadb import floor_sql

        maria = mariadb_connection(settings_dict)
        upsert = floor_sql()[0]

        def cycle(n: int) -> None:
            with maria.cursor() as cursor:
                cursor.execute(upsert, (f"{prefix}:{n % 10}", prefix))

        return cycle

    return make


def lock_cycle(alias: str, *, fresh: bool = False, **options: Any) -> Callable[[str], Cycle]:
    """``with lock(...): pass`` on ten names in turn, or a new name each time
    (``fresh``: what ``min_hold`` keeps must not be taken again)."""
    from django_dlock import lock

    def make(prefix: str) -> Cycle:
        serial = itertools.count()

        def cycle(n: int) -> None:
            name = f"{prefix}-{os.getpid()}:{next(serial) if fresh else n % 10}"
            with lock(name, using=alias, ttl=30, **options):
                pass

        return cycle

    return make


def once_per_cycle(alias: str, *, due: bool) -> Callable[[str], Cycle]:
    """``once_per()`` of a new name each time (due), or of one window held (not due)."""
    from django_dlock import once_per

    def make(prefix: str) -> Cycle:
        serial = itertools.count()
        held = f"{prefix}:held"
        with once_per(held, every=3600, using=alias):
            pass  # the window stays taken for an hour

        def cycle(n: int) -> None:
            name = f"{prefix}-{os.getpid()}:{next(serial)}" if due else held
            with once_per(name, every=60, using=alias) as got:
                if bool(got) is not due:
                    raise RuntimeError(f"once_per({name!r}) was {'not ' * due}due")

        return cycle

    return make


def create_counter_table(alias: str) -> None:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {COUNTER_TABLE}")
        cursor.execute(f"CREATE TABLE {COUNTER_TABLE} (id integer PRIMARY KEY, n bigint NOT NULL)")
        cursor.execute(f"INSERT INTO {COUNTER_TABLE} (id, n) VALUES (1, 0)")


def transaction_cycle(alias: str, until: str | None) -> Callable[[str], Cycle]:
    """``atomic()`` around one UPDATE: alone (``until=None``), inside ``lock()``
    (``"exit"``), or with ``lock(..., until="commit")`` inside it."""
    from django.db import connections, transaction

    from django_dlock import lock

    def make(prefix: str) -> Cycle:
        def write() -> None:
            with connections[alias].cursor() as cursor:
                cursor.execute(f"UPDATE {COUNTER_TABLE} SET n = n + 1 WHERE id = 1")

        def cycle(n: int) -> None:
            name = f"{prefix}:{n % 10}"
            if until is None:
                with transaction.atomic(using=alias):
                    write()
            elif until == "exit":
                with lock(name, using=alias, ttl=30), transaction.atomic(using=alias):
                    write()
            else:
                with transaction.atomic(using=alias), lock(name, using=alias, ttl=30, until=until):
                    write()

        return cycle

    return make


def kept_alias(alias: str) -> str:
    """A twin of ``alias`` whose connections live 60 s (``CONN_MAX_AGE``): the
    threads that take and release ``until="commit"``'s locks otherwise open a
    connection for each (Django's default, 0, closes it after each call)."""
    from django.db import connections

    kept = f"{alias}_kept"
    if kept not in connections.settings:
        connections.settings[kept] = {**connections.settings[alias], "CONN_MAX_AGE": 60}
    return kept


def contenders(alias: str, refused: Counter[str]) -> dict[str, Callable[[str], Cycle]]:
    """Each one-client cycle of one database, by name."""
    found: dict[str, Callable[[str], Cycle]] = {
        "floor: one upsert": upsert_floor(alias),
        "floor: upsert + delete (lock)": kinds_setup.floor(alias),
    }
    for scenario, (keys, limit, period) in throttle_scenarios().items():
        found[f"throttle, {scenario}"] = dlock_throttle(alias, keys, limit, period, refused)
    found |= {
        "lock()": lock_cycle(alias),
        "lock(lock_delay=5)": lock_cycle(alias, lock_delay=5),
        "lock(), a new name each time": lock_cycle(alias, fresh=True),
        "lock(min_hold=60), a new name each time": lock_cycle(alias, fresh=True, min_hold=60),
        "once_per(every=60), due (a new name)": once_per_cycle(alias, due=True),
        "once_per(), not due (window held)": once_per_cycle(alias, due=False),
    }
    if alias != "sqlite":  # SQLite refuses until="commit" (one writer at a time)
        create_counter_table(alias)
        found |= {
            "atomic() + UPDATE, no lock": transaction_cycle(alias, None),
            "lock() around atomic() + UPDATE": transaction_cycle(alias, "exit"),
            "atomic() + lock(until='commit') + UPDATE": transaction_cycle(alias, "commit"),
            "the same, CONN_MAX_AGE=60": transaction_cycle(kept_alias(alias), "commit"),
        }
    return found


def redis_contenders(port: int, refused: Counter[str]) -> dict[str, Callable[[str], Cycle]]:
    found = {}
    for name in features_redis.LIMITERS:
        for scenario, (keys, limit, period) in throttle_scenarios().items():
            found[f"{name}, {scenario}"] = redis_throttle(port, name, keys, limit, period, refused)
    return found


def run(
    aliases: list[str],
    redis_port: int,
    rounds: int,
    seconds: float,
    cpu: dict[str, Callable[[], float] | None],
) -> list[dict[str, Any]]:
    """Every cycle of every database and of Redis in interleaved rounds; each
    one's median round, its rounds' rates and the share of uses refused."""
    refused: Counter[str] = Counter()
    makers: dict[tuple[str, str], Callable[[str], Cycle]] = {}
    for alias in aliases:
        makers |= {(alias, name): make for name, make in contenders(alias, refused).items()}
    makers |= {
        ("redis", name): make for name, make in redis_contenders(redis_port, refused).items()
    }
    cycles: dict[tuple[str, str], Cycle] = {}
    prefixes: dict[tuple[str, str], str] = {}
    for index, (key, make) in enumerate(makers.items()):
        prefixes[key] = f"f{index}-{os.getpid()}"
        cycles[key] = make(prefixes[key])
        for n in range(2 * KEYS):  # connections, prepared statements, every key's first row
            cycles[key](n)
    refused.clear()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in cycles}
    for number in range(rounds):
        print(f"  features: one-client round {number + 1}/{rounds}", file=sys.stderr)
        for key, cycle in cycles.items():
            runs[key].append(measure_round(cycle, seconds, cpu.get(key[0])))
    results = []
    for (alias, name), measured in runs.items():
        latencies = sorted(x for run in measured for x in run["latencies"])
        server = [run["server_cpu_ms"] for run in measured if run["server_cpu_ms"] is not None]
        prefix = prefixes[(alias, name)]
        uses = refused[prefix + ":all"]
        results.append(
            {
                "database": alias,
                "name": name,
                "cycles_per_s": statistics.median(run["rate"] for run in measured),
                "rounds": [run["rate"] for run in measured],
                "cycle_p50_ms": latencies[len(latencies) // 2] * 1000,
                "client_cpu_ms": statistics.median(run["client_cpu_ms"] for run in measured),
                "server_cpu_ms": statistics.median(server) if server else None,
                "refused_share": refused[prefix] / uses if uses else None,
            }
        )
    return results
