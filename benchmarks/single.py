"""One client, no contention: every contender in interleaved rounds, on
loopback and through the delaying proxy, with round trips and statements."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from benchmarks import contenders, counting, floor_sql
from benchmarks.contenders import Contender, Cycle
from benchmarks.plan import Plan, Servers

COUNTED_CYCLES = 50  # whose round trips and statements are counted, through the proxy


@contextmanager
def default_through(port: int) -> Iterator[None]:
    """Point the ``default`` alias at the proxy for a while: django-db-mutex
    knows no other database."""
    from django.db import connections

    connection = connections["default"]
    connection.close()
    saved = connection.settings_dict["PORT"]
    connection.settings_dict["PORT"] = port
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["PORT"] = saved


@dataclass(frozen=True)
class Entry:
    contender: Contender
    floor_key: str  # which floor its ratio is to
    using: str | None = None  # the Django alias it runs on, for counting
    context: Callable[[], AbstractContextManager[None]] = nullcontext
    proxied: bool = False


def uncontended_entries(s: Servers) -> list[Entry]:
    pg, proxy_port, redis_port = s.postgres, s.pg_proxy.port, s.redis.port
    sqlite_path = _sqlite_path()
    entries = [
        Entry(
            Contender(
                "raw one-statement floor", "postgresql", contenders.postgres_floor(pg), floor=True
            ),
            "pg",
        ),
        Entry(
            Contender(
                "4 statements by hand", "postgresql", contenders.postgres_four_statements(pg)
            ),
            "pg",
        ),
        Entry(
            Contender("django-dlock", "postgresql", contenders.dlock("default")), "pg", "default"
        ),
        Entry(Contender("advisory locks", "postgresql", contenders.advisory(pg)), "pg"),
        Entry(Contender("django-db-mutex", "postgresql", contenders.db_mutex()), "pg", "default"),
        Entry(Contender("redis-py Lock", "redis", contenders.redis_py(redis_port)), "pg"),
        Entry(
            Contender("python-redis-lock", "redis", contenders.python_redis_lock(redis_port)), "pg"
        ),
        Entry(
            Contender(
                "raw one-statement floor",
                "sqlite",
                contenders.sqlite_floor(sqlite_path),
                floor=True,
            ),
            "sqlite",
        ),
        Entry(Contender("django-dlock", "sqlite", contenders.dlock("sqlite")), "sqlite", "sqlite"),
        Entry(
            Contender(
                "raw one-statement floor",
                "postgresql",
                contenders.postgres_floor(pg, proxy_port),
                floor=True,
            ),
            "proxy",
            proxied=True,
        ),
        Entry(
            Contender("django-dlock", "postgresql", contenders.dlock("proxied")),
            "proxy",
            "proxied",
            proxied=True,
        ),
        Entry(
            Contender("advisory locks", "postgresql", contenders.advisory(pg, proxy_port)),
            "proxy",
            proxied=True,
        ),
        Entry(
            Contender("django-db-mutex", "postgresql", contenders.db_mutex()),
            "proxy",
            "default",
            lambda: default_through(proxy_port),
            proxied=True,
        ),
        Entry(
            Contender("redis-py Lock", "redis", contenders.redis_py(s.redis_proxy.port)),
            "proxy",
            proxied=True,
        ),
        Entry(
            Contender(
                "python-redis-lock", "redis", contenders.python_redis_lock(s.redis_proxy.port)
            ),
            "proxy",
            proxied=True,
        ),
    ]
    entries += [Entry(c, "mariadb", "mariadb") for c in contenders.mariadb_contenders()]
    return entries


def _sqlite_path() -> str:
    from django.db import connections

    return str(connections["sqlite"].settings_dict["NAME"])


def measure_round(
    cycle: Cycle, seconds: float, server_cpu: Callable[[], float] | None
) -> dict[str, Any]:
    latencies: list[float] = []
    acquisitions: list[float] = []  # what cycles that time their acquisition return
    cpu_before = server_cpu() if server_cpu else 0.0
    client_before = time.process_time()
    ends = time.perf_counter() + seconds
    n = 0
    while True:
        started = time.perf_counter()
        if started >= ends:
            break
        acquired = cycle(n)
        latencies.append(time.perf_counter() - started)
        if isinstance(acquired, float):
            acquisitions.append(acquired)
        n += 1
    total = sum(latencies)
    return {
        "rate": n / total,
        "latencies": latencies,
        "acquisitions": acquisitions,
        "client_cpu_ms": (time.process_time() - client_before) * 1000 / n,
        "server_cpu_ms": (server_cpu() - cpu_before) * 1000 / n if server_cpu else None,
    }


def uncontended(plan: Plan, s: Servers) -> list[dict[str, Any]]:
    entries = uncontended_entries(s)
    cycles: list[Cycle] = []
    for index, entry in enumerate(entries):
        with entry.context():
            cycle = entry.contender.make(f"u{index}")
            # Every name once: django-dlock's rows made, as an application's exist.
            for n in range(floor_sql.NAMES + 10):
                cycle(n)
        cycles.append(cycle)
    rounds: list[list[dict[str, Any]]] = [[] for _ in entries]
    for number in range(plan.rounds):
        print(f"  uncontended round {number + 1}/{plan.rounds}", file=sys.stderr)
        for index, entry in enumerate(entries):
            with entry.context():
                rounds[index].append(
                    measure_round(cycles[index], plan.seconds, s.cpu.get(entry.contender.server))
                )
    results = []
    for index, entry in enumerate(entries):
        runs = rounds[index]
        latencies = sorted(x for run in runs for x in run["latencies"])
        server = [run["server_cpu_ms"] for run in runs if run["server_cpu_ms"] is not None]
        result: dict[str, Any] = {
            "name": entry.contender.name,
            "server": entry.contender.server,
            "path": "proxy" if entry.proxied else "loopback",
            "floor_key": entry.floor_key,
            "floor": entry.contender.floor,
            "cycles_per_s": statistics.median(run["rate"] for run in runs),
            "rounds": [run["rate"] for run in runs],
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
            "client_cpu_ms": statistics.median(run["client_cpu_ms"] for run in runs),
            "server_cpu_ms": statistics.median(server) if server else None,
        }
        results.append(result)
    # Round trips and statements, through the proxy (the loopback twin sends the same).
    by_name = {(e.contender.name, e.contender.server): e for e in entries if e.proxied}
    for result in results:
        twin = by_name.get((result["name"], result["server"]))
        if twin is None or result["server"] == "sqlite":
            continue
        proxy = s.redis_proxy if twin.contender.server == "redis" else s.pg_proxy
        with twin.context():
            cycle = twin.contender.make("rt")
            # The counted cycles' names taken once before, so that django-dlock's
            # rows exist (its steady state), as with the rounds' names.
            for n in range(COUNTED_CYCLES):
                cycle(n)
            result.update(counting.per_cycle(cycle, proxy, COUNTED_CYCLES, twin.using))
    return results
