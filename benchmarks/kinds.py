"""The lock kinds side by side on PostgreSQL, SQLite and MariaDB: shared and
permit cycles beside the exclusive one, a reentrant re-entry, ``acquire_all``
beside single acquires, readers beside a writer, a crowded semaphore, and a
leader's hand-over.

    python -m benchmarks.kinds [--quick] [--only cycles,readers,semaphore,leader]
    bash scripts/benchmark.sh   # after the other parts, on servers of its own

Databases: ``DATABASE_URL`` or ``DLOCK_PG_URL`` (PostgreSQL), ``DLOCK_MARIADB_URL``
or ``DLOCK_MYSQL_URL`` (MariaDB), and a SQLite file of its own (see
``benchmarks.kinds_setup``); a database without a URL is left out. The figures
go into the benchmark JSON under ``"kinds"`` (the file's other parts are
kept), the chart beside it. Every figure is a ratio to a reference measured in
the same run, in interleaved rounds, and the median round counts: this
machine's two cores are shared and noisy, ratios hold better than absolutes.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import document, kinds_cycles, kinds_report, kinds_setup
from benchmarks.plan import ROOT
from benchmarks.proxy import DelayProxy
from benchmarks.setup import cpu_model

SECTIONS = ("cycles", "readers", "semaphore", "leader")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.kinds", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument(
        "--databases",
        default=",".join(kinds_setup.LABELS),
        help="comma-separated: postgresql,sqlite,mariadb (those with a URL)",
    )
    parser.add_argument(
        "--rounds", type=_positive, help="rounds of each part (default 7 for cycles, 3 for crowds)"
    )
    parser.add_argument("--json", type=Path, help="the benchmark JSON to add the figures to")
    parser.add_argument("--chart", type=Path)
    args = parser.parse_args(argv)
    databases = set(args.databases.split(",")) - set(kinds_setup.LABELS)
    if databases:
        parser.error(f"unknown databases {', '.join(sorted(databases))}")
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(
            f"unknown sections {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}"
        )
    artifacts = ROOT / "artifacts"
    args.json = args.json or (
        artifacts / "benchmark-quick.json" if args.quick else ROOT / "docs/benchmark.json"
    )
    args.chart = args.chart or (
        artifacts / "kinds-quick.png" if args.quick else ROOT / "docs/kinds.png"
    )
    return args


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def machine() -> dict[str, Any]:
    """The machine a run measured, for its JSON (the load average says how quiet it was)."""
    import django

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "load_average": os.getloadavg(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "django": django.get_version(),
    }


def _counting_proxies() -> dict[str, DelayProxy]:
    """A proxy (no delay) before each networked database, to count round trips."""
    import dj_database_url

    proxies = {}
    for alias, url in kinds_setup.urls().items():
        if alias == "sqlite":
            continue
        database = dj_database_url.parse(url)
        proxy = DelayProxy(
            database["HOST"] or "127.0.0.1",
            int(database["PORT"]),
            delay=0.0,
            postgres=alias == "postgresql",
        )
        proxies[alias] = proxy.__enter__()
    return proxies


def run(args: argparse.Namespace, proxies: dict[str, DelayProxy]) -> dict[str, Any]:
    from django.db import connections

    from benchmarks import kinds_crowds, kinds_leader

    configured = kinds_setup.configure({alias: proxy.port for alias, proxy in proxies.items()})
    kinds_setup.migrate(configured)
    aliases = [alias for alias in configured if alias in args.databases.split(",")]
    wanted = set(args.only.split(","))
    rounds, seconds = (3, 0.3) if args.quick else (7, 1.0)
    crowd_rounds, crowd_seconds = (1, 1.0) if args.quick else (3, 3.0)
    if args.rounds:  # a noisy part measured again, longer
        rounds, crowd_rounds = args.rounds, args.rounds
    results: dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "databases": aliases,
        "versions": {alias: kinds_setup.version(alias) for alias in aliases},
    }
    cpu = {alias: kinds_setup.server_cpu(alias) for alias in aliases}
    if "cycles" in wanted:
        for alias in aliases:
            kinds_setup.create_floor_table(alias)
        cycles = _attempt(
            results,
            "cycles",
            aliases,
            lambda: kinds_cycles.uncontended(aliases, rounds, seconds, cpu),
        )
        if cycles is not None:
            results["cycles"] = cycles
        repeats = 10 if args.quick else 50
        results["operations"] = _each(
            results,
            "operations",
            aliases,
            lambda alias: kinds_cycles.count_operations(alias, proxies.get(alias), repeats),
        )
    connections.close_all()
    if wanted & {"readers", "semaphore"}:
        pool = kinds_crowds.Pool(kinds_crowds.PROCESSES)
        try:
            if "readers" in wanted:
                results["readers"] = _each(
                    results,
                    "readers",
                    aliases,
                    lambda alias: kinds_crowds.readers_and_writer(
                        pool, alias, crowd_rounds, crowd_seconds, cpu[alias]
                    ),
                )
            if "semaphore" in wanted:
                results["semaphore"] = _each(
                    results,
                    "semaphore",
                    aliases,
                    lambda alias: kinds_crowds.semaphore(
                        pool, alias, crowd_rounds, crowd_seconds, cpu[alias]
                    ),
                )
        finally:
            pool.close()
    if "leader" in wanted:
        resigns, kills = (3, 1) if args.quick else (10, 3)
        results["leader"] = _each(
            results, "leader", aliases, lambda alias: kinds_leader.hand_over(alias, resigns, kills)
        )
    results["machine"]["load_average_end"] = os.getloadavg()
    results["goals"] = kinds_report.goals(results)
    results["partial"] = wanted != set(SECTIONS) or aliases != configured
    return results


def _attempt(
    results: dict[str, Any], section: str, databases: list[str], measure: Callable[[], Any]
) -> Any:
    """``measure()``, or None when it raised: then the error is listed under
    "errors", and the run goes on with the other parts (a server that crashed
    fails its own parts only)."""
    try:
        return measure()
    except Exception as error:
        print(f"  kinds: {section} on {', '.join(databases)} failed: {error!r}", file=sys.stderr)
        failure = {"section": section, "databases": databases, "error": repr(error)}
        results.setdefault("errors", []).append(failure)
        return None


def _each(
    results: dict[str, Any], section: str, aliases: list[str], measure: Callable[[str], Any]
) -> dict[str, Any]:
    """``measure(alias)`` of each database that did not fail."""
    figures = {}
    for alias in aliases:
        figure = _attempt(results, section, [alias], functools.partial(measure, alias))
        if figure is not None:
            figures[alias] = figure
    return figures


def save(results: dict[str, Any], path: Path, *, partial: bool) -> dict[str, Any]:
    """Put ``results`` into the benchmark JSON at ``path`` under "kinds" (the
    other parts of the file are kept); what is there now. A ``partial`` run
    (some sections or databases: a part measured again) replaces only what it
    measured, and is listed under "reruns" with its machine's load."""
    earlier = document.read(path).get("kinds")
    kinds = merge(earlier, results) if partial and earlier else results
    document.put(path, "kinds", kinds)
    return kinds


def merge(earlier: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """``earlier`` with what ``again`` measured in its place."""
    merged = dict(earlier)
    databases = again["databases"]
    if "cycles" in again:
        kept = [row for row in earlier.get("cycles", []) if row["database"] not in databases]
        merged["cycles"] = kept + again["cycles"]
    for section in ("versions", "operations", "readers", "semaphore", "leader"):
        if section in again:
            merged[section] = {**earlier.get(section, {}), **again[section]}
    merged["databases"] = list(dict.fromkeys([*earlier["databases"], *databases]))
    measured = [key for key in (*SECTIONS, "operations") if key in again]
    rerun = {"sections": measured, "databases": databases, "machine": again["machine"]}
    merged["reruns"] = [*earlier.get("reruns", []), rerun]
    again_measured = {(section, database) for section in measured for database in databases}
    merged["errors"] = [
        error
        for error in earlier.get("errors", [])
        if not any(
            (error["section"], database) in again_measured for database in error["databases"]
        )
    ] + again.get("errors", [])
    merged["goals"] = kinds_report.goals(merged)
    return merged


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    proxies = _counting_proxies()
    try:
        results = run(args, proxies)
    finally:
        for proxy in proxies.values():
            proxy.__exit__()
    partial = results.pop("partial")
    results = save(results, args.json, partial=partial)
    kinds_report.print_tables(results)
    kinds_report.chart(results["goals"], args.chart)
    print(f'\nJSON: {args.json} ("kinds")  chart: {args.chart}')
    sys.stdout.flush()
    if results.get("errors"):
        for error in results["errors"]:
            print(
                f"FAILED: {error['section']} on {', '.join(error['databases'])}: {error['error']}"
            )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
