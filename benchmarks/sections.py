"""The measurements with several client processes, and the purge of a big table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Any

from benchmarks import clients, contenders, floor_sql, setup
from benchmarks.plan import ROOT, Plan, Servers


def multi_client(plan: Plan, s: Servers) -> list[dict[str, Any]]:
    """The floor and django-dlock: the processes share 1,000 names (issue 45's
    floor, ``benchmarks.floor``'s clients), whose lock rows exist; the other
    locks: ten resources of each process's own."""
    pg, redis_port = s.postgres, s.redis.port
    shared_names = floor_sql.names("clients")
    warm = floor_sql.manager_cycle("default", shared_names, floor_sql.OWNER)
    for n in range(len(shared_names)):
        warm(n)
    others = [
        ("advisory locks", "postgresql", contenders.advisory(pg)),
        ("django-db-mutex", "postgresql", contenders.db_mutex()),
        ("redis-py Lock", "redis", contenders.redis_py(redis_port)),
    ]
    samples: dict[tuple[str, int], list[dict[str, float]]] = {}
    for number in range(plan.client_rounds):
        for count in plan.client_counts:
            print(f"  {count} clients, round {number + 1}/{plan.client_rounds}", file=sys.stderr)
            shared = floor_sql.client_makers(pg, "default", shared_names, count)
            runners = [
                ("raw one-statement floor", "postgresql", shared["floor"]),
                ("django-dlock", "postgresql", shared["django-dlock"]),
                *others,
            ]
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
