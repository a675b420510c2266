"""PostgreSQL's full release (``release_any``) in the cases that decide its cost:
no waiter, an exclusive head, a reader head with readers behind, a permit head.

    DATABASE_URL=postgres://... python -m benchmarks.release_cases [--runs 400] [--explain DIR] [--case head]
        [--others 300]

Each case's state is written once; the release's prepared statement then runs
``--runs`` times, each in a transaction rolled back (so each finds the same
state; the tables are vacuumed every few runs, which leave dead rows), and
``pg_stat_statements`` (where the server loads it) gives its mean
execution time; else the mean of ``EXPLAIN ANALYZE``'s. ``--explain``: write each
case's ``EXPLAIN (ANALYZE)`` there, and print its number of lines.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks import setup

RESOURCE = "release-case"
ME = "me"


def _waiter(owner: str, mode: str, limit: int | None = None) -> tuple[Any, ...]:
    return (owner, mode, limit)


# Each case: the lock's row (owner, hold_count, limit), the shared holds
# (owner, limit), and the queue in order (owner, mode, limit).
CASES: dict[str, dict[str, Any]] = {
    "no waiter": {"row": (ME, 1, None), "holds": [], "queue": []},
    "exclusive head": {
        "row": (ME, 1, None),
        "holds": [],
        "queue": [_waiter(f"w{n}", "exclusive") for n in range(7)],
    },
    "reader head, readers behind": {
        "row": (ME, 1, None),
        "holds": [],
        "queue": [
            *(_waiter(f"r{n}", "shared") for n in range(3)),
            _waiter("w", "exclusive"),
            *(_waiter(f"s{n}", "shared") for n in range(2)),
        ],
    },
    "permit head": {
        "row": ("", 2, 2),  # the owner: rules.SHARED_HOLDERS
        "holds": [(ME, 2), ("other", 2)],
        "queue": [_waiter(f"p{n}", "shared", 2) for n in range(4)],
    },
}


TABLES = ("distributed_locks", "distributed_lock_holds", "distributed_lock_waiters")
BATCH = 50


def _write_case(cursor: Any, case: dict[str, Any], others: int) -> None:
    from django_dlock.rules import SHARED_HOLDERS

    cursor.execute("DELETE FROM distributed_lock_waiters WHERE resource LIKE %s", [RESOURCE + "%"])
    # Other resources' waiters: what a scan of the whole queue table would read.
    cursor.execute(
        "INSERT INTO distributed_lock_waiters (resource, owner, expires_at) "
        "SELECT %s || mod(n, 10), 'o' || n, now() + interval '1 hour' FROM generate_series(1, %s) n",
        [RESOURCE + "-other-", others],
    )
    cursor.execute("DELETE FROM distributed_lock_holds WHERE resource = %s", [RESOURCE])
    cursor.execute("DELETE FROM distributed_locks WHERE resource = %s", [RESOURCE])
    owner, count, limit = case["row"]
    cursor.execute(
        "INSERT INTO distributed_locks (resource, owner, acquired_at, expires_at, "
        'fencing_token, hold_count, label, "limit") VALUES (%s, %s, now(), '
        "now() + interval '1 hour', 10, %s, '', %s)",
        [RESOURCE, owner or SHARED_HOLDERS, count, limit],
    )
    for holder, hold_limit in case["holds"]:
        cursor.execute(
            "INSERT INTO distributed_lock_holds (resource, owner, label, acquired_at, "
            "expires_at, hold_count, fencing_token, \"limit\") VALUES (%s, %s, '', now(), "
            "now() + interval '1 hour', 1, 10, %s)",
            [RESOURCE, holder, hold_limit],
        )
    for waiter, mode, waiter_limit in case["queue"]:
        cursor.execute(
            "INSERT INTO distributed_lock_waiters (resource, owner, expires_at, channel, ttl, "
            "\"limit\", mode) VALUES (%s, %s, now() + interval '1 hour', 'dlock_case', "
            "interval '30 seconds', %s, %s)",
            [RESOURCE, waiter, waiter_limit, mode],
        )


def measure(
    runs: int, explain: Path | None, only: str = "", others: int = 0
) -> dict[str, dict[str, Any]]:
    setup.configure(None, other_apps=())
    setup.migrate()
    from django.db import connection

    from django_dlock.backends import backend_for
    from django_dlock.backends.postgresql.release import ReleaseStatement

    statement = ReleaseStatement(backend_for("default")).statement
    params = {"resource": RESOURCE, "owner": ME}
    results: dict[str, dict[str, Any]] = {}
    with connection.cursor() as cursor:
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cursor.execute("SELECT pg_stat_statements_reset()")
            stats = True
        except Exception:  # (the extension is optional)
            stats = False
        cursor.execute(statement.prepare_sql("release_case"))
        execute = statement.execute_sql("release_case")
        for name, case in CASES.items():
            if only not in name:
                continue
            _write_case(cursor, case, others)
            cursor.execute(f"VACUUM ANALYZE {', '.join(TABLES)}")
            row: dict[str, Any] = {}
            for _ in range(10):  # past the custom plans (plancache's first five)
                cursor.execute("BEGIN")
                cursor.execute(execute, params)
                answer = cursor.fetchone()
                row["answer"] = f"{answer[0]}, woke {answer[2]}"
                cursor.execute("ROLLBACK")
            if explain is not None:
                cursor.execute("BEGIN")
                cursor.execute(f"EXPLAIN (ANALYZE, VERBOSE, BUFFERS) {execute}", params)
                plan = [line for (line,) in cursor.fetchall()]
                cursor.execute("ROLLBACK")
                (explain / f"{name.replace(' ', '_').replace(',', '')}.txt").write_text(
                    "\n".join(plan) + "\n"
                )
                row["plan_lines"] = len(plan)
            if stats:
                cursor.execute("SELECT pg_stat_statements_reset()")
            times = []
            for run in range(runs):
                if run % BATCH == 0:  # each run leaves dead row versions behind
                    cursor.execute(f"VACUUM {', '.join(TABLES)}")
                cursor.execute("BEGIN")
                if stats:
                    cursor.execute(execute, params)
                else:
                    cursor.execute(f"EXPLAIN (ANALYZE, TIMING OFF) {execute}", params)
                    times.append(float(cursor.fetchall()[-1][0].split()[2]))
                cursor.execute("ROLLBACK")
            if stats:
                cursor.execute(
                    "SELECT mean_exec_time, calls FROM pg_stat_statements "
                    "WHERE query LIKE 'PREPARE release_case%%'"
                )
                mean, calls = cursor.fetchone()
                row["mean_ms"], row["calls"] = mean, calls
            else:
                row["mean_ms"], row["calls"] = statistics.mean(times), runs
            results[name] = row
        cursor.execute("DEALLOCATE release_case")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--explain", type=Path, help="a directory for the plans")
    parser.add_argument("--case", default="", help="only the cases whose name has this")
    parser.add_argument("--others", type=int, default=0, help="waiters of other resources")
    options = parser.parse_args()
    if options.explain:
        options.explain.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    table = measure(options.runs, options.explain, options.case, options.others)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load)}; after: ", end="")
    print(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    for name, row in table.items():
        lines = f"  {row['plan_lines']} plan lines" if "plan_lines" in row else ""
        print(f"{name:<28} {row['mean_ms']:.4f} ms ({row['calls']} calls) {row['answer']}{lines}")


if __name__ == "__main__":
    main()
