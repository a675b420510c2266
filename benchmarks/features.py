"""Issue 36's features beside what they extend and beside their nearest peers,
on PostgreSQL, SQLite and MariaDB: throttles beside the raw one-statement
upsert and Redis rate limiters, lock-delay, priorities, ``until="commit"``,
deadlock detection, ``min_hold`` and ``once_per()``.

    python -m benchmarks.features [--quick] [--only cycles,throttle,priorities,delay,deadlock]
    BENCH_FEATURES=1 bash scripts/benchmark.sh   # after the other parts, on servers of its own

Databases as ``benchmarks.kinds`` finds them (``benchmarks.kinds_setup``); a
redis-server of its own (``benchmarks.setup.RedisServer``). The figures go
into the benchmark JSON under ``"features"`` (the file's other parts are kept).
A speed is a ratio to a reference measured in the same rounds, contenders
alternating, and the median round counts: this machine's two cores are shared
and noisy, ratios hold better than absolutes.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import document, features_report, kinds_setup
from benchmarks.features_redis import LIMITERS
from benchmarks.plan import ROOT

SECTIONS = ("cycles", "throttle", "priorities", "delay", "deadlock")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.features", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="fewer and shorter rounds")
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument(
        "--databases",
        default=",".join(kinds_setup.LABELS),
        help="comma-separated: postgresql,sqlite,mariadb (those with a URL)",
    )
    parser.add_argument("--json", type=Path, help="the benchmark JSON to add the figures to")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    unknown |= set(args.databases.split(",")) - set(kinds_setup.LABELS)
    if unknown:
        parser.error(f"unknown sections or databases: {', '.join(sorted(unknown))}")
    args.json = args.json or (
        ROOT / "artifacts/benchmark-quick.json" if args.quick else ROOT / "docs/benchmark.json"
    )
    return args


def _machine() -> dict[str, Any]:
    from benchmarks.kinds import machine
    from benchmarks.setup import version_of

    return machine() | {"redis_server": version_of("redis-server", "--version")}


def _commit() -> str:
    import subprocess

    done = subprocess.run(  # noqa: S603 - a fixed command
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "-"


class Run:
    """The figures of one run; a part that raises is listed under "errors"
    and the run goes on (a server that fails spoils its own parts only)."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results = results

    def attempt(self, section: str, where: str, measure: Callable[[], Any]) -> Any:
        try:
            return measure()
        except Exception as error:
            print(f"  features: {section} on {where} failed: {error!r}", file=sys.stderr)
            failure = {"section": section, "where": where, "error": repr(error)}
            self.results.setdefault("errors", []).append(failure)
            return None

    def each(self, section: str, aliases: list[str], measure: Callable[[str], Any]) -> None:
        figures = {}
        for alias in aliases:
            figure = self.attempt(section, alias, functools.partial(measure, alias))
            if figure is not None:
                figures[alias] = figure
        self.results.setdefault(section, {}).update(figures)


def run(
    args: argparse.Namespace, redis_port: int, redis_cpu: Callable[[], float]
) -> dict[str, Any]:
    from django.db import connections

    from benchmarks import features_crowds, features_cycles, features_waits
    from benchmarks.kinds_crowds import Pool

    configured = kinds_setup.configure()
    kinds_setup.migrate(configured)
    aliases = [alias for alias in configured if alias in args.databases.split(",")]
    wanted = set(args.only.split(","))
    quick = args.quick
    rounds, seconds = (3, 0.3) if quick else (5, 1.0)
    crowd_rounds, crowd_seconds = (1, 1.0) if quick else (3, 3.0)
    trials = 2 if quick else 5
    results: dict[str, Any] = {
        "machine": _machine(),
        "commit": _commit(),
        "quick": quick,
        "databases": aliases,
        "versions": {alias: kinds_setup.version(alias) for alias in aliases},
    }
    measured = Run(results)
    cpu: dict[str, Callable[[], float] | None] = {
        alias: kinds_setup.server_cpu(alias) for alias in aliases
    }
    cpu["redis"] = redis_cpu
    if "cycles" in wanted:
        for alias in aliases:
            kinds_setup.create_floor_table(alias)
        cycles = measured.attempt(
            "cycles",
            ", ".join(aliases),
            lambda: features_cycles.run(aliases, redis_port, rounds, seconds, cpu),
        )
        if cycles is not None:
            results["cycles"] = cycles
    connections.close_all()
    pool = Pool(features_crowds.CONTENDERS)
    try:
        if "throttle" in wanted:
            limiters = [*aliases, *LIMITERS]
            results["throttle_crowd"] = measured.attempt(
                "throttle_crowd",
                ", ".join(limiters),
                lambda: features_crowds.throttle_crowd(
                    pool, limiters, redis_port, [100, 10_000], crowd_rounds, crowd_seconds
                ),
            )
        if "priorities" in wanted:
            measured.each(
                "priorities",
                aliases,
                lambda alias: features_crowds.priorities_contended(
                    pool, alias, crowd_rounds, crowd_seconds, cpu[alias]
                ),
            )
            measured.each(
                "late_priority",
                aliases,
                lambda alias: features_crowds.late_high_priority(pool, alias, trials),
            )
        if "delay" in wanted:
            measured.each(
                "lock_delay",
                aliases,
                lambda alias: features_waits.lock_delay_accuracy(pool, alias, trials),
            )
        if "deadlock" in wanted:
            wait = 1.0 if quick else 2.0
            measured.each(
                "deadlock_waiting",
                aliases,
                lambda alias: features_waits.waiting_cost(pool, alias, trials, wait, cpu[alias]),
            )
            measured.each(
                "deadlock_detection",
                aliases,
                lambda alias: features_waits.deadlock_detection(pool, alias, trials),
            )
    finally:
        pool.close()
    results["machine"]["load_average_end"] = os.getloadavg()
    return results


def main(argv: list[str] | None = None) -> None:
    from benchmarks.cpu import tree_cpu
    from benchmarks.setup import RedisServer

    args = _arguments(argv)
    with RedisServer() as redis_server:
        results = run(args, redis_server.port, lambda: tree_cpu(redis_server.pid))
    document.put(args.json, "features", results)
    features_report.print_tables(results)
    print(f'\nJSON: {args.json} ("features")')
    sys.stdout.flush()
    for error in results.get("errors", []):
        print(f"FAILED: {error['section']} on {error['where']}: {error['error']}")
    if results.get("errors"):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
