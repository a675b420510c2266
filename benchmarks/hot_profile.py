"""Where the client's CPU goes in ``benchmarks.floor``'s cycle (issue 45, item 4):
the manager's ``acquire(name, owner=..., ttl=30)`` + ``release`` over 1,000
names in turn, under cProfile, on each database found (as ``benchmarks.floor``
configures them), without and with the Prometheus receivers.

    DATABASE_URL=$DLOCK_PG_URL python -m benchmarks.hot_profile [--cycles 3000] [--top 25]

Prints, per database and receivers off/on, the client CPU per cycle without
the profiler (process time over ``--cycles`` cycles, after a warm-up over every
name), then the profile's top functions by own time and by cumulative time,
in µs per cycle of the process's CPU time (not wall time: the
waits for the server are left out). cProfile adds its own cost to every call: read its figures
as shares, and the unprofiled CPU per cycle as the absolute.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable

from benchmarks import floor_sql as sql


def _cpu_us(cycle: Callable[[int], object], start: int, cycles: int) -> float:
    began = time.process_time()
    for n in range(start, start + cycles):
        cycle(n)
    return (time.process_time() - began) * 1e6 / cycles


def _top(profile: cProfile.Profile, cycles: int, key: str, top: int) -> None:
    stats = pstats.Stats(profile)
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = path.split("site-packages/")[-1].split("django_dlock/")[-1]
        rows.append((own if key == "own" else cumulative, calls, f"{where}:{line}({name})"))
    rows.sort(reverse=True)
    print(f"    by {key} time, µs per cycle (calls per cycle):")
    for seconds, calls, where in rows[:top]:
        print(f"    {seconds * 1e6 / cycles:8.1f}  {calls / cycles:5.1f}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hot_profile")
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--only", default="", help="comma-separated aliases (postgresql,sqlite,...)"
    )
    args = parser.parse_args()
    from benchmarks.floor import Prometheus, configure

    aliases = [a for a in configure() if a != "postgresql_fast"]
    if args.only:
        aliases = [a for a in aliases if a in args.only.split(",")]
    prometheus = Prometheus()
    for alias in aliases:
        for receivers in (False, True):
            prometheus.switch(receivers)
            names = sql.names(f"profile-{int(receivers)}")
            cycle = sql.manager_cycle(alias, names, sql.OWNER)
            for n in range(sql.NAMES):  # every row made, every statement prepared
                cycle(n)
            # The least of three runs: the neighbours' load only adds.
            plain = min(_cpu_us(cycle, sql.NAMES + k * args.cycles, args.cycles) for k in range(3))
            # Timed by the process's CPU clock: waits for the server are not the client's work.
            profile = cProfile.Profile(time.process_time)
            start = sql.NAMES + 3 * args.cycles
            profile.enable()
            for n in range(start, start + args.cycles):
                cycle(n)
            profile.disable()
            title = "with the Prometheus receivers" if receivers else "no receivers"
            calls = sum(row[1] for row in pstats.Stats(profile).stats.values()) / args.cycles  # type: ignore[attr-defined]
            print(
                f"\n== {alias}, {title}: client CPU {plain:.1f} µs per cycle (unprofiled), "
                f"{calls:.0f} Python calls per cycle"
            )
            _top(profile, args.cycles, "own", args.top)
            _top(profile, args.cycles, "cumulative", args.top)
            prometheus.switch(False)


if __name__ == "__main__":
    main()
