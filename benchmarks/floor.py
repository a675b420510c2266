"""django-dlock's exclusive lock beside the floor (issue 45): acquire + release
with the owner given and a ttl of 30 s, over 1,000 names taken in turn,
beside a table of the lock table's shape used through the raw driver in
autocommit (``benchmarks.floor_sql``).

    source scripts/pg-cluster.sh
    PG_CLUSTER_OPTIONS="-c shared_preload_libraries=pg_stat_statements" pg_cluster_start
    source scripts/mariadb-server.sh && mariadb_start
    DATABASE_URL=$DLOCK_PG_URL python -m benchmarks.floor [--quick] [--json PATH]
    bash scripts/benchmark.sh   # its first part, on servers of its own

Parts (``--only``): ``durable`` (PostgreSQL, one client: the floor, the
manager's ``acquire`` + ``release``, ``with lock()``, and the manager with
the Prometheus receivers connected as the example project connects them, in
interleaved rounds), ``fast`` (the same with ``synchronous_commit`` off),
``clients`` (8, 32 and 64 processes sharing the names, through
``benchmarks.clients.throughput``), ``sqlite`` and ``mariadb`` (each beside
its own floor). Per cycle: wall time, client CPU, the CPU of the
connection's server process, the whole server's, and on PostgreSQL each
statement's execution from pg_stat_statements (when the server preloads it).
Ratios hold better than absolute figures on a shared machine: the load
average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import django
from django.conf import settings

from benchmarks import clients, document, floor_report
from benchmarks import floor_sql as sql
from benchmarks.cpu import parent_of, tree_cpu
from benchmarks.floor_measure import Contender, beside_floor, goals, interleave, summary
from benchmarks.floor_sql import OWNER, Cycle
from benchmarks.plan import ROOT

PARTS = ("durable", "fast", "clients", "sqlite", "mariadb")
FLOOR = "floor"
MANAGER = "acquire + release"
WITH_LOCK = "with lock()"
METRICS = "acquire + release, Prometheus receivers"


@dataclass(frozen=True)
class Plan:
    rounds: int
    cycles: int  # per contender and round
    client_counts: tuple[int, ...]
    client_rounds: int
    client_seconds: float


def plan_of(args: argparse.Namespace) -> Plan:
    quick = args.quick
    return Plan(
        # Many short rounds: the neighbours' load comes in bursts of seconds.
        rounds=args.rounds or (2 if quick else 10),
        cycles=args.cycles or (300 if quick else 1000),
        client_counts=(8,) if quick else (8, 32, 64),
        client_rounds=1 if quick else 3,
        client_seconds=1.0 if quick else 3.0,
    )


def configure() -> list[str]:
    """Django with a database alias per server found: ``postgresql`` (and
    ``postgresql_fast``, its twin with ``synchronous_commit`` off), ``sqlite``
    (a file of its own, WAL, as the README configures it), ``mariadb``; and
    the Prometheus metrics app of the example project."""
    import dj_database_url

    databases: dict[str, Any] = {}
    given = os.environ.get("DATABASE_URL", "")
    postgres = given if given.startswith("postgres") else os.environ.get("DLOCK_PG_URL", "")
    if postgres:
        databases["postgresql"] = dj_database_url.parse(postgres)
        fast = dj_database_url.parse(postgres)
        fast["OPTIONS"] = {"options": "-c synchronous_commit=off"}
        databases["postgresql_fast"] = fast
    databases["sqlite"] = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": f"{tempfile.mkdtemp(prefix='dlock-floor-')}/floor.sqlite3",
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL",
        },
    }
    mariadb = os.environ.get("DLOCK_MARIADB_URL") or os.environ.get("DLOCK_MYSQL_URL", "")
    if mariadb:
        databases["mariadb"] = dj_database_url.parse(mariadb)
    first = next(iter(databases))
    settings.configure(
        DEBUG=False,
        DATABASES={**databases, "default": databases[first]},
        DLOCK_DATABASE=first,
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_dlock",
            "django_dlock.contrib.prometheus.PrometheusMetrics",
        ],
        USE_TZ=True,
        TIME_ZONE="UTC",
        LOGGING_CONFIG=None,
    )
    django.setup()
    from django.core.management import call_command

    for alias in databases:
        if alias != "postgresql_fast":  # the same database as postgresql
            call_command("migrate", database=alias, verbosity=0, skip_checks=True)
    return list(databases)


class Prometheus:
    """The receivers that the example project's ``PrometheusMetrics`` app
    installed when Django started, switched on (``switch(True)``) for one
    contender's rounds only: the other contenders run without them."""

    def __init__(self) -> None:
        from django_dlock.contrib.prometheus import install

        self.metrics = install()  # the app's: installed once per registry
        self.metrics.disconnect()

    def switch(self, on: bool) -> None:
        if on:
            self.metrics.connect()
        else:
            self.metrics.disconnect()

    def acquisitions(self) -> float:
        """Acquisitions the receivers counted: those of the rounds they were on for."""
        return sum(
            sample.value
            for family in self.metrics.attempts.collect()
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels.get("outcome") == "acquired"
        )


def django_backend_pid(alias: str) -> int:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def pg_settings(connection: Any) -> dict[str, str]:
    names = ("server_version", "fsync", "synchronous_commit", "shared_preload_libraries")
    return {name: str(connection.execute(f"SHOW {name}").fetchone()[0]) for name in names}


def monitor_of(settings_dict: dict[str, Any]) -> Any | None:
    """A connection that reads pg_stat_statements, or None when the server does not preload it."""
    monitor = sql.postgres_connection(settings_dict)
    if "pg_stat_statements" not in pg_settings(monitor)["shared_preload_libraries"]:
        print("  pg_stat_statements is not preloaded: no per-statement figures", file=sys.stderr)
        monitor.close()
        return None
    monitor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return monitor


def run_rounds(contenders: list[Contender], plan: Plan) -> list[dict[str, Any]]:
    """Warm each contender over all its names, then interleaved rounds; the rows beside the floor."""
    for contender in contenders:
        contender.warm(sql.NAMES + 10)  # every row made, every statement prepared
    interleave(contenders, plan.rounds, plan.cycles)
    return beside_floor([summary(contender) for contender in contenders])


def postgres_one_client(plan: Plan, *, fast: bool, prometheus: Prometheus) -> dict[str, Any]:
    from django.db import connections

    alias = "postgresql_fast" if fast else "postgresql"
    settings_dict = dict(connections[alias].settings_dict)
    raw = sql.postgres_connection(settings_dict, fast=fast)
    with raw.cursor() as cursor:
        if not fast:
            sql.create_table("postgresql", cursor)
    monitor = monitor_of(settings_dict)
    backend = int(raw.execute("SELECT pg_backend_pid()").fetchone()[0])
    postmaster = parent_of(backend)

    def contender(name: str, cycle: Cycle, pid: int | None = None, **more: Any) -> Contender:
        return Contender(name, cycle, pid, lambda: tree_cpu(postmaster), monitor=monitor, **more)

    django_side = [
        contender(MANAGER, sql.manager_cycle(alias, sql.names("manager"), OWNER)),
        contender(WITH_LOCK, sql.lock_cycle(alias, sql.names("lock"), OWNER)),
        contender(
            METRICS,
            sql.manager_cycle(alias, sql.names("metrics"), OWNER),
            around=prometheus.switch,
        ),
    ]
    django_side[0].warm(1)
    pid = django_backend_pid(alias)
    for each in django_side:
        each.backend_pid = pid
    floor = contender(FLOOR, sql.raw_cycle("postgresql", raw, sql.names("floor"), OWNER), backend)
    counted = prometheus.acquisitions()
    try:
        rows = run_rounds([floor, *django_side], plan)
        found = pg_settings(raw)
        # The receivers were on for the cycles of their contender, and only those.
        rows[-1]["prometheus_acquisitions"] = prometheus.acquisitions() - counted
        rows[-1]["cycles_run"] = django_side[-1].done
    finally:
        raw.close()
        if monitor is not None:
            monitor.close()
        connections.close_all()
    found.pop("shared_preload_libraries")
    return {"server": found, "pg_stat_statements": monitor is not None, "rows": rows}


def postgres_clients(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """Each count of client processes sharing the 1,000 names, the floor and the manager in turn."""
    from django.db import connections

    settings_dict = dict(connections["postgresql"].settings_dict)
    with sql.postgres_connection(settings_dict) as raw:  # run alone (--only clients): no table yet
        if raw.execute("SELECT to_regclass(%s)", [sql.TABLE]).fetchone()[0] is None:
            sql.create_table("postgresql", raw.cursor())
    all_names = sql.names("clients")
    warm = Contender(MANAGER, sql.manager_cycle("postgresql", all_names, OWNER))
    warm.warm(sql.NAMES)
    postmaster = parent_of(django_backend_pid("postgresql"))
    results: dict[str, list[dict[str, Any]]] = {}
    for count in plan.client_counts:
        shared = sql.client_makers(settings_dict, "postgresql", all_names, count)
        makers = {FLOOR: shared["floor"], MANAGER: shared["django-dlock"]}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in makers}
        for number in range(plan.client_rounds):
            print(f"  {count} clients, round {number + 1}/{plan.client_rounds}", file=sys.stderr)
            for name, make in makers.items():
                runs[name].append(
                    clients.throughput(
                        make, count, plan.client_seconds, lambda: tree_cpu(postmaster)
                    )
                )
        results[str(count)] = beside_floor(
            [floor_report.clients_row(n, r) for n, r in runs.items()]
        )
    return results


def other_database(alias: str, plan: Plan) -> dict[str, Any]:
    """SQLite or MariaDB, one client: its floor, the manager, ``with lock()``."""
    from django.db import connections

    from benchmarks.kinds_setup import server_cpu

    vendor = connections[alias].vendor
    settings_dict = dict(connections[alias].settings_dict)
    if vendor == "sqlite":
        raw = sql.sqlite_connection(str(settings_dict["NAME"]))
        sql.create_table(vendor, raw)
        found = {
            "sqlite_version": ".".join(map(str, connections[alias].get_database_version())),
            "journal_mode": str(raw.execute("PRAGMA journal_mode").fetchone()[0]),
            "synchronous": str(raw.execute("PRAGMA synchronous").fetchone()[0]),
        }
    else:
        raw = sql.mariadb_connection(settings_dict)
        with raw.cursor() as cursor:
            sql.create_table(vendor, cursor)
            cursor.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit")
            version, flush = cursor.fetchone()
        found = {"server_version": str(version), "innodb_flush_log_at_trx_commit": str(flush)}
    server = server_cpu(alias)
    contenders = [
        Contender(FLOOR, sql.raw_cycle(vendor, raw, sql.names("floor"), OWNER), None, server),
        Contender(MANAGER, sql.manager_cycle(alias, sql.names("manager"), OWNER), None, server),
        Contender(WITH_LOCK, sql.lock_cycle(alias, sql.names("lock"), OWNER), None, server),
    ]
    try:
        rows = run_rounds(contenders, plan)
    finally:
        raw.close()
        connections.close_all()
    return {"server": found, "rows": rows}


def measure(parts: Sequence[str], plan: Plan, aliases: list[str]) -> dict[str, Any]:
    from benchmarks.kinds import machine

    results: dict[str, Any] = {"machine": machine(), "plan": vars(plan) | {"names": sql.NAMES}}
    prometheus = Prometheus()
    steps: list[tuple[str, str, Callable[[], Any]]] = [
        (
            "durable",
            "postgresql",
            lambda: postgres_one_client(plan, fast=False, prometheus=prometheus),
        ),
        ("fast", "postgresql", lambda: postgres_one_client(plan, fast=True, prometheus=prometheus)),
        ("clients", "postgresql", lambda: postgres_clients(plan)),
        ("sqlite", "sqlite", lambda: other_database("sqlite", plan)),
        ("mariadb", "mariadb", lambda: other_database("mariadb", plan)),
    ]
    for part, alias, step in steps:
        if part not in parts:
            continue
        if alias not in aliases:
            print(f"  {part}: no {alias} server (its URL is not set), left out", file=sys.stderr)
            continue
        print(f"  {part}...", file=sys.stderr)
        if part in ("durable", "fast"):  # the server's settings, beside the rows
            measured = step()
            results.setdefault("postgresql", {})[part] = measured["server"]
            results["pg_stat_statements"] = measured["pg_stat_statements"]
            results[part] = measured["rows"]
        elif part == "clients":
            results[part] = step()
        else:
            measured = step()
            results.setdefault("servers", {})[part] = measured["server"]
            results[part] = measured["rows"]
    results["machine"]["load_average_end"] = os.getloadavg()
    results["goals"] = goals(results, judged=MANAGER, metrics=METRICS)
    return results


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.floor", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer, shorter rounds")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated: {','.join(PARTS)}"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 10; --quick 2)")
    parser.add_argument(
        "--cycles", type=int, help="per contender and round (default 1000; --quick 300)"
    )
    parser.add_argument(
        "--json", type=Path, help='the benchmark JSON to write the figures into, under "floor"'
    )
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    args.json = args.json or (
        ROOT / "artifacts/benchmark-quick.json" if args.quick else ROOT / "docs/benchmark.json"
    )
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    started = time.perf_counter()
    aliases = configure()
    results = measure(args.only.split(","), plan_of(args), aliases)
    results["seconds"] = round(time.perf_counter() - started, 1)
    document.put(args.json, "floor", results)
    floor_report.print_tables(results)
    print(f'\nJSON: {args.json} ("floor")')
    sys.stdout.flush()


if __name__ == "__main__":
    main()
