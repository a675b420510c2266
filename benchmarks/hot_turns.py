"""Issue 46's hot lock: 8 processes on one resource, a 1 ms hold, a blocking
``with lock(r, ttl=30, timeout=30)``, side by side in one run.

    DLOCK_PG_URL=postgres://... python -m benchmarks.hot_turns --json /tmp/hot.json

For PostgreSQL (durable, as the server is configured) and SQLite (WAL): the
acquisitions/s of 8 blocking processes, Jain's index, their share of one
process alone doing the same, and the wake-up p50 (the holder's release call
to the waiter's block starting; "after return": from the release call's
return; "release": the release call's own time, its commit included). Beside them, on the same server: PostgreSQL
advisory locks and redis-py's Lock (python-redis-lock too, where installed).
Rounds alternate between contenders, so a load that comes and goes touches
each; the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

from benchmarks import clients, setup
from benchmarks.hot import AdvisoryHot, DlockHot, PythonRedisLockHot, RedisPyHot

HOLD = 0.001
PROCESSES = 8


def _contenders(pg: dict[str, Any], redis_port: int) -> dict[str, tuple[Callable[[str], Any], str]]:
    """{name: (factory, the dlock alias it measures or "")}."""
    found: dict[str, tuple[Callable[[str], Any], str]] = {
        "django-dlock, PostgreSQL": (lambda o: DlockHot("default", o), "default"),
        "advisory locks, PostgreSQL": (lambda o: AdvisoryHot(pg, o), ""),
        "django-dlock, SQLite": (lambda o: DlockHot("sqlite", o), "sqlite"),
        "redis-py Lock": (lambda o: RedisPyHot(redis_port, o), ""),
    }
    if importlib.util.find_spec("redis_lock") is not None:
        found["python-redis-lock"] = (lambda o: PythonRedisLockHot(redis_port, o), "")
    return found


def measure(rounds: int, seconds: float, wake_samples: int) -> dict[str, Any]:
    pg = setup.configure(None, other_apps=())
    setup.migrate()
    results: dict[str, dict[str, list[Any]]] = {}
    with setup.RedisServer() as redis:
        contenders = _contenders(pg, redis.port)
        for number in range(rounds):
            for name, (make, _) in contenders.items():
                print(f"  {name}, round {number + 1}/{rounds}", file=sys.stderr)
                row = results.setdefault(name, {})
                eight = clients.contention(make, True, PROCESSES, seconds, HOLD)
                row.setdefault("per_s", []).append(eight["acquisitions_per_s"])
                row.setdefault("jain", []).append(eight["jain"])
                alone = clients.contention(make, True, 1, seconds, HOLD)
                row.setdefault("alone_per_s", []).append(alone["acquisitions_per_s"])
                row.setdefault("share", []).append(
                    eight["acquisitions_per_s"] / alone["acquisitions_per_s"]
                )
        wakes: dict[str, list[tuple[float, float]]] = {}
        for name, (make, _) in contenders.items():
            print(f"  wake-up: {name}", file=sys.stderr)
            wakes[name] = clients.wakeup_times(make, wake_samples, (0.02, 0.06))
    table = {}
    for name, row in results.items():
        table[name] = {key: statistics.median(values) for key, values in row.items()}
        called = sorted(since_call for since_call, _ in wakes[name])
        returned = sorted(since_return for _, since_return in wakes[name])
        table[name]["wake_p50_ms"] = statistics.median(called) * 1000
        table[name]["wake_p90_ms"] = called[int(len(called) * 0.9)] * 1000
        table[name]["wake_after_return_p50_ms"] = statistics.median(returned) * 1000
        table[name]["release_p50_ms"] = statistics.median(
            (a - b) * 1000 for a, b in zip(called, returned, strict=True)
        )
    return table


def report(table: dict[str, Any], load: tuple[float, float, float]) -> None:
    advisory = table["advisory locks, PostgreSQL"]["per_s"]
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"{'contender':<28} {'acq/s':>7} {'vs adv':>6} {'Jain':>5} {'alone/s':>8} "
        f"{'share':>6} {'wake p50':>9} {'p90':>7} {'after return':>12} {'release':>8}"
    )
    for name, row in table.items():
        print(
            f"{name:<28} {row['per_s']:>7.0f} {row['per_s'] / advisory:>5.2f}x {row['jain']:>5.2f} "
            f"{row['alone_per_s']:>8.0f} {row['share']:>5.2f}x {row['wake_p50_ms']:>7.2f}ms "
            f"{row['wake_p90_ms']:>5.2f}ms {row['wake_after_return_p50_ms']:>9.2f}ms "
            f"{row['release_p50_ms']:>6.2f}ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", required=True, help="where to write the figures (not docs/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--wake-samples", type=int, default=40)
    options = parser.parse_args()
    load = os.getloadavg()
    table = measure(options.rounds, options.seconds, options.wake_samples)
    report(table, load)
    with open(options.json, "w") as out:
        json.dump(
            {"load_before": load, "load_after": os.getloadavg(), "table": table}, out, indent=1
        )


if __name__ == "__main__":
    main()
