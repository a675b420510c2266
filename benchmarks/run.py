"""The side-by-side benchmark: django-dlock beside the raw one-statement floor
and other lock implementations. ``scripts/benchmark.sh`` runs it on a throwaway
PostgreSQL cluster; ``python -m benchmarks --help`` for its options.

Every figure comes from rounds that alternate between the contenders, and the
median round counts: the machine is shared and noisy, ratios measured side by
side hold better than any absolute figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import clients, contenders, counting, report, setup
from benchmarks.contenders import Contender, Cycle
from benchmarks.cpu import parent_of, tree_cpu
from benchmarks.proxy import DelayProxy

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    quick: bool
    rounds: int
    seconds: float  # per contender and round, single client
    client_counts: tuple[int, ...]
    client_rounds: int
    client_seconds: float
    contention_seconds: float
    contention_rounds: int
    wakeup_samples: int
    wakeup_hold: tuple[float, float]
    purge_rows: int
    delay: float
    json_path: Path
    chart_path: Path


def plan_from(args: argparse.Namespace) -> Plan:
    quick = args.quick
    artifacts = ROOT / "artifacts"
    return Plan(
        quick=quick,
        rounds=3 if quick else 7,
        seconds=0.3 if quick else 1.0,
        client_counts=(1, 8, 32) if quick else (1, 8, 32, 64),
        client_rounds=1 if quick else 3,
        client_seconds=1.0 if quick else 3.0,
        contention_seconds=1.0 if quick else 3.0,
        contention_rounds=1 if quick else 3,
        wakeup_samples=3 if quick else 10,
        wakeup_hold=(0.1, 0.3) if quick else (0.3, 1.2),
        purge_rows=args.purge_rows or (100_000 if quick else 1_000_000),
        delay=args.delay_ms / 1000,
        json_path=args.json
        or (artifacts / "benchmark-quick.json" if quick else ROOT / "docs/benchmark.json"),
        chart_path=args.chart
        or (artifacts / "benchmark-quick.png" if quick else ROOT / "docs/benchmark.png"),
    )


@dataclass
class Servers:
    postgres: dict[str, Any]
    postmaster: int
    redis: setup.RedisServer
    pg_proxy: DelayProxy
    redis_proxy: DelayProxy
    cpu: dict[str, Callable[[], float]] = field(default_factory=dict)


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
    cpu_before = server_cpu() if server_cpu else 0.0
    client_before = time.process_time()
    ends = time.perf_counter() + seconds
    n = 0
    while True:
        started = time.perf_counter()
        if started >= ends:
            break
        cycle(n)
        latencies.append(time.perf_counter() - started)
        n += 1
    total = sum(latencies)
    return {
        "rate": n / total,
        "latencies": latencies,
        "client_cpu_ms": (time.process_time() - client_before) * 1000 / n,
        "server_cpu_ms": (server_cpu() - cpu_before) * 1000 / n if server_cpu else None,
    }


def uncontended(plan: Plan, s: Servers) -> list[dict[str, Any]]:
    entries = uncontended_entries(s)
    cycles: list[Cycle] = []
    for entry in entries:
        with entry.context():
            cycle = entry.contender.make("u")
            for n in range(20):
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
            result.update(counting.per_cycle(twin.contender.make("rt"), proxy, 50, twin.using))
    return results


def multi_client(plan: Plan, s: Servers) -> list[dict[str, Any]]:
    pg, redis_port = s.postgres, s.redis.port
    runners = [
        ("raw one-statement floor", "postgresql", contenders.postgres_floor(pg)),
        ("django-dlock", "postgresql", contenders.dlock("default")),
        ("advisory locks", "postgresql", contenders.advisory(pg)),
        ("django-db-mutex", "postgresql", contenders.db_mutex()),
        ("redis-py Lock", "redis", contenders.redis_py(redis_port)),
    ]
    samples: dict[tuple[str, int], list[dict[str, float]]] = {}
    for number in range(plan.client_rounds):
        for count in plan.client_counts:
            print(f"  {count} clients, round {number + 1}/{plan.client_rounds}", file=sys.stderr)
            for name, server, make in runners:
                samples.setdefault((name, count), []).append(
                    clients.throughput(make, count, plan.client_seconds, s.cpu[server])
                )
    results = []
    for (name, count), runs in samples.items():
        results.append(
            {
                "name": name,
                "clients": count,
                **{key: statistics.median(run[key] for run in runs) for key in runs[0]},
            }
        )
    return results


def contention(plan: Plan, s: Servers) -> list[dict[str, Any]]:
    from benchmarks.hot import hot_locks

    locks = hot_locks(s.postgres, s.redis.port)
    samples: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for number in range(plan.contention_rounds):
        print(f"  contention round {number + 1}/{plan.contention_rounds}", file=sys.stderr)
        for blocking in (False, True):
            for name, (make, can_wait) in locks.items():
                if blocking and not can_wait:
                    continue
                samples.setdefault((name, blocking), []).append(
                    clients.contention(make, blocking, 8, plan.contention_seconds, 0.001)
                )
    results = []
    for (name, blocking), runs in samples.items():
        results.append(
            {
                "name": name,
                "mode": "blocking" if blocking else "non-blocking",
                "acquisitions_per_s": statistics.median(r["acquisitions_per_s"] for r in runs),
                "attempts_per_s": statistics.median(r["attempts_per_s"] for r in runs),
                "jain": statistics.median(r["jain"] for r in runs),
                "turns": runs[len(runs) // 2]["turns"],
            }
        )
    return results


def wakeups(plan: Plan, s: Servers) -> list[dict[str, Any]]:
    from benchmarks.hot import hot_locks

    results = []
    for name, (make, can_wait) in hot_locks(s.postgres, s.redis.port).items():
        if not can_wait:
            continue
        print(f"  wake-up: {name}", file=sys.stderr)
        latencies = sorted(clients.wakeup(make, plan.wakeup_samples, plan.wakeup_hold))
        results.append(
            {
                "name": name,
                "p50_ms": statistics.median(latencies) * 1000,
                "max_ms": latencies[-1] * 1000,
                "samples_ms": [x * 1000 for x in latencies],
            }
        )
    return results


def purge(plan: Plan) -> dict[str, Any]:
    """``benchmarks.purge`` in a process of its own (it configures Django for a
    database of its own)."""
    out = ROOT / "artifacts" / "purge.json"
    out.parent.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "DATABASE_URL": setup.postgres_url(),
        "BENCH_PURGE_ROWS": str(plan.purge_rows),
    }
    subprocess.run(  # noqa: S603 - this interpreter, a module of this repository
        [sys.executable, "-m", "benchmarks.purge", "--json", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        stdout=sys.stderr,
    )
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def describe_machine(s: Servers) -> dict[str, Any]:
    import django
    import psycopg
    import redis
    from django.db import connections

    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT version()")
        (pg_version,) = cursor.fetchone()
    sqlite_version = ".".join(map(str, connections["sqlite"].get_database_version()))
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": setup.cpu_model(),
        "load_average": os.getloadavg(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "redis_py": redis.__version__,
        "postgresql": pg_version.split(" on ")[0],
        "postgresql_fsync": _pg_setting("fsync"),
        "sqlite": sqlite_version,
        "redis_server": setup.version_of("redis-server", "--version"),
    }


def _pg_setting(name: str) -> str:
    from django.db import connections

    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT current_setting(%s)", [name])
        return str(cursor.fetchone()[0])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer and shorter rounds, 100k rows: for development"
    )
    parser.add_argument(
        "--delay-ms", type=float, default=0.5, help="proxy delay each way (default 0.5)"
    )
    parser.add_argument(
        "--only",
        default="uncontended,clients,contention,wakeup,purge",
        help="comma-separated sections",
    )
    parser.add_argument("--purge-rows", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--chart", type=Path)
    args = parser.parse_args(argv)
    plan = plan_from(args)
    sections = set(args.only.split(","))
    postgres_settings = __import__("dj_database_url").parse(setup.postgres_url())
    with (
        DelayProxy(
            postgres_settings["HOST"],
            int(postgres_settings["PORT"]),
            delay=plan.delay,
            postgres=True,
        ) as pg_proxy,
        setup.RedisServer() as redis_server,
        DelayProxy("127.0.0.1", redis_server.port, delay=plan.delay) as redis_proxy,
    ):
        postgres = setup.configure(pg_proxy.port)
        setup.migrate()
        contenders.create_floor_tables()
        from django.db import connections

        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (backend,) = cursor.fetchone()
        postmaster = parent_of(backend)
        servers = Servers(postgres, postmaster, redis_server, pg_proxy, redis_proxy)
        servers.cpu = {
            "postgresql": lambda: tree_cpu(postmaster),
            "redis": lambda: tree_cpu(redis_server.pid),
        }
        results: dict[str, Any] = {
            "machine": describe_machine(servers),
            "quick": plan.quick,
            "delay_ms": args.delay_ms,
        }
        if "uncontended" in sections:
            results["uncontended"] = uncontended(plan, servers)
            results["operations"] = counting.dlock_operations("proxied", pg_proxy)
        if "clients" in sections:
            results["clients"] = multi_client(plan, servers)
        if "contention" in sections:
            results["contention"] = contention(plan, servers)
        if "wakeup" in sections:
            results["wakeup"] = wakeups(plan, servers)
        clients.close_connections()
    if "purge" in sections:
        results["purge"] = purge(plan)
    plan.json_path.parent.mkdir(parents=True, exist_ok=True)
    plan.json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    report.print_tables(results)
    report.chart(results, plan.chart_path)
    print(f"\nJSON: {plan.json_path.relative_to(ROOT)}  chart: {plan.chart_path.relative_to(ROOT)}")
