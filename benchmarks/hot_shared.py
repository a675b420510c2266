"""Issue 46's hot lock with readers and permits: 8 processes on one resource, a
1 ms hold, a blocking ``with lock(r, ttl=30, timeout=30, ...)``, on PostgreSQL.

    DLOCK_PG_URL=postgres://... python -m benchmarks.hot_shared --json /tmp/shared.json

Cases: 8 writers (the exclusive hot lock, to compare), 6 readers beside 2
writers (a writer's release grants the readers queued before the next
writer), and 8 permit waiters of a semaphore of 2. For each: acquisitions/s
(of all kinds), Jain's index, and, where the server loads ``pg_stat_statements``,
the calls and mean time of the statements that ran most (the release's among
them). Rounds alternate between the cases; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from benchmarks import clients, setup
from benchmarks.hot import DlockHot

HOLD = 0.001
PROCESSES = 8


class KindHot(DlockHot):
    """django-dlock's hot lock taken as ``kind`` says (``shared=True``, a ``limit``)."""

    def __init__(self, owner: str, kind: dict[str, Any]) -> None:
        super().__init__("default", owner)
        self.kind = kind


def _writers(owner: str) -> KindHot:
    return KindHot(owner, {})


def _mix(owner: str) -> KindHot:
    # p0 and p1 write; the others read.
    return KindHot(owner, {} if owner in ("p0", "p1") else {"shared": True})


def _permits(owner: str) -> KindHot:
    return KindHot(owner, {"limit": 2})


CASES = {"8 writers": _writers, "6 readers, 2 writers": _mix, "8 permits of 2": _permits}


def _statements(top: int = 4) -> list[dict[str, Any]]:
    """The statements that took most of the server's time since the last reset."""
    from django.db import connection

    with connection.cursor() as cursor:
        try:
            cursor.execute(
                "SELECT calls, mean_exec_time, plans, mean_plan_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 60) "
                "FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT %s",
                [top],
            )
        except Exception:  # (the extension is optional)
            return []
        rows = cursor.fetchall()
        cursor.execute("SELECT pg_stat_statements_reset()")
    connection.close()
    return [
        {"calls": c, "mean_ms": m, "plans": p, "plan_ms": pm, "query": q} for c, m, p, pm, q in rows
    ]


def measure(rounds: int, seconds: float, only: str = "") -> dict[str, Any]:
    setup.configure(None, other_apps=())
    setup.migrate()
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    connection.close()
    results: dict[str, dict[str, list[Any]]] = {}
    for number in range(rounds):
        for name, make in CASES.items():
            if only not in name:
                continue
            print(f"  {name}, round {number + 1}/{rounds}", file=sys.stderr)
            _statements()  # reset
            eight = clients.contention(make, True, PROCESSES, seconds, HOLD)
            row = results.setdefault(name, {})
            row.setdefault("per_s", []).append(eight["acquisitions_per_s"])
            row.setdefault("jain", []).append(eight["jain"])
            row.setdefault("statements", []).append(_statements())
    return {
        name: {
            "per_s": statistics.median(row["per_s"]),
            "jain": statistics.median(row["jain"]),
            "statements": row["statements"][-1],
        }
        for name, row in results.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", required=True, help="where to write the figures (not docs/)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--case", default="", help="only the cases whose name has this")
    options = parser.parse_args()
    load = os.getloadavg()
    table = measure(options.rounds, options.seconds, options.case)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load)}; after: ", end="")
    print(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    for name, row in table.items():
        print(f"{name:<22} {row['per_s']:>7.0f}/s  Jain {row['jain']:.2f}")
        for statement in row["statements"]:
            print(
                f"    {statement['calls']:>6} calls {statement['mean_ms']:>7.3f} ms  "
                f"{statement['plans']:>5} plans {statement['plan_ms']:>6.3f} ms  "
                f"{statement['query']}"
            )
    with open(options.json, "w") as out:
        json.dump({"load_before": load, "load_after": os.getloadavg(), "table": table}, out)


if __name__ == "__main__":
    main()
