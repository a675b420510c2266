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
import time
from pathlib import Path
from typing import Any

from benchmarks import clients, contenders, counting, document, report, sections, setup, single
from benchmarks.cpu import parent_of, tree_cpu
from benchmarks.plan import ROOT, Servers, plan_from
from benchmarks.proxy import DelayProxy

# The keys of the benchmark JSON that parts run before this one wrote.
PARTS_BEFORE = ("floor",)


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
    parser.add_argument("--purge-from", type=Path, help="take the purge figures from this JSON")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--chart", type=Path)
    args = parser.parse_args(argv)
    plan = plan_from(args)
    wanted = set(args.only.split(","))
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
        if "uncontended" in wanted:
            results["uncontended"] = single.uncontended(plan, servers)
            results["operations"] = counting.dlock_operations("proxied", pg_proxy)
        if "clients" in wanted:
            results["clients"] = sections.multi_client(plan, servers)
        if "contention" in wanted:
            results["contention"] = sections.contention(plan, servers)
        if "wakeup" in wanted:
            results["wakeup"] = sections.wakeups(plan, servers)
        clients.close_connections()
    if "purge" in wanted:
        results["purge"] = sections.purge(plan)
    elif args.purge_from:  # figures of an earlier run, e.g. when only the lock path changed
        results["purge"] = json.loads(args.purge_from.read_text())["purge"]
    plan.json_path.parent.mkdir(parents=True, exist_ok=True)
    # What scripts/benchmark.sh measured before this part (benchmarks.floor) stays.
    earlier = document.read(plan.json_path)
    kept = {key: earlier[key] for key in PARTS_BEFORE if key in earlier}
    plan.json_path.write_text(json.dumps({**kept, **results}, indent=1, default=str) + "\n")
    report.print_tables(results)
    report.chart(results, plan.chart_path)
    print(f"\nJSON: {_shown(plan.json_path)}  chart: {_shown(plan.chart_path)}")


def _shown(path: Path) -> Path:
    """``path`` from the repository's root when it is inside it (``--json`` may name any file)."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
