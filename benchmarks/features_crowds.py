"""Several processes at once: a crowd on one throttle key (beside the Redis
limiters, and checked per window), 8 processes on one lock with and without
priorities, and one high-priority waiter behind low-priority ones.

The processes are ``kinds_crowds.Pool``'s, configured as the parent is; they
start together at a moment of ``time.monotonic()``, one clock for every
process of the host.
"""

from __future__ import annotations

import bisect
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks import features_redis
from benchmarks.clients import jain
from benchmarks.kinds_crowds import Pool, together

THROTTLERS = 4  # processes on one throttle key
CONTENDERS = 8  # processes on one lock
LOW_WAITERS = 6  # low-priority waiters queued before the high-priority one


def use_key(
    limiter: str, redis_port: int, key: str, limit: int, start_at: float, seconds: float
) -> dict[str, Any]:
    """From ``start_at`` for ``seconds``, use ``key`` (rate ``limit`` per
    second) as fast as the answers come: django-dlock's ``throttle()`` on the
    database ``limiter``, or a Redis limiter by its name; the times of the
    uses granted (the database's, or Redis's or the client's: see
    ``features_redis``) and how many were decided."""
    if limiter in features_redis.LIMITERS:
        use = features_redis.LIMITERS[limiter](redis_port, limit, 1.0)
    else:
        from django_dlock import throttle

        def use(key: str) -> tuple[bool, float]:
            decision = throttle(key, rate=f"{limit}/s", using=limiter).try_use()
            return decision.granted, decision.at.timestamp()

    use(f"{key}:warm")
    time.sleep(max(start_at - time.monotonic(), 0))
    ends, cpu, decided, granted = start_at + seconds, time.process_time(), 0, []
    while time.monotonic() < ends:
        ok, at = use(key)
        decided += 1
        if ok:
            granted.append(at)
    return {"granted": granted, "decided": decided, "cpu": time.process_time() - cpu}


def most_in_a_window(times: list[float], period: float) -> int:
    """The most uses in any half-open window of ``period`` seconds."""
    times = sorted(times)
    return max(
        (bisect.bisect_left(times, at + period) - index for index, at in enumerate(times)),
        default=0,
    )


def throttle_crowd(
    pool: Pool,
    limiters: list[str],
    redis_port: int,
    limits: list[int],
    rounds: int,
    seconds: float,
) -> list[dict[str, Any]]:
    """``THROTTLERS`` processes on one key, each limiter and limit in turn
    within every round; per (limiter, limit): decisions and grants per second
    (median round) and the most grants in any one-second window of any round."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {
        (limiter, limit): [] for limit in limits for limiter in limiters
    }
    for number in range(rounds):
        print(f"  features: throttle crowd round {number + 1}/{rounds}", file=sys.stderr)
        for limiter, limit in runs:
            key = f"crowd:{limit}:{number}:{time.time_ns()}"
            start_at = time.monotonic() + 1.0
            results = pool.run(
                [
                    (use_key, (limiter, redis_port, key, limit, start_at, seconds))
                    for _ in range(THROTTLERS)
                ]
            )
            granted = [at for one in results for at in one["granted"]]
            runs[(limiter, limit)].append(
                {
                    "decided_per_s": sum(one["decided"] for one in results) / seconds,
                    "granted_per_s": len(granted) / seconds,
                    "most_in_a_window": most_in_a_window(granted, 1.0),
                    "client_cpu_ms": sum(one["cpu"] for one in results)
                    * 1000
                    / max(sum(one["decided"] for one in results), 1),
                }
            )
    return [
        {
            "limiter": limiter,
            "limit": limit,
            "processes": THROTTLERS,
            "decided_per_s": statistics.median(run["decided_per_s"] for run in measured),
            "decided_rounds": [run["decided_per_s"] for run in measured],
            "granted_per_s": statistics.median(run["granted_per_s"] for run in measured),
            "most_in_a_window": max(run["most_in_a_window"] for run in measured),
            "client_cpu_ms": statistics.median(run["client_cpu_ms"] for run in measured),
        }
        for (limiter, limit), measured in runs.items()
    ]


def priorities_contended(
    pool: Pool,
    alias: str,
    rounds: int,
    seconds: float,
    server_cpu: Callable[[], float] | None,
) -> dict[str, Any]:
    """``CONTENDERS`` processes in ``lock(timeout=60)`` on one resource, 1 ms
    holds: all of priority 0, then each of its own (-3 to 4), in every round."""
    variants = {
        "priority 0": [0] * CONTENDERS,
        "priorities -3..4": [n - 3 for n in range(CONTENDERS)],
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for number in range(rounds):
        print(f"  features: {alias} priorities round {number + 1}/{rounds}", file=sys.stderr)
        for name, priorities in variants.items():
            resource = f"prio:{number}:{time.time_ns()}"
            kinds = [(resource, {"priority": p}, 0.0) for p in priorities]
            turns = together(pool, alias, kinds, seconds, server_cpu)
            counts = [sum(one.turns) for one in turns]
            runs[name].append(
                {
                    "per_s": sum(counts) / seconds,
                    "jain": jain(counts),
                    "turns": counts,
                    "lock_p50_ms": statistics.median(w for one in turns for w in one.waits) * 1000,
                }
            )
    figures: dict[str, Any] = {}
    for name, measured in runs.items():
        figures[name] = {
            "per_s": statistics.median(run["per_s"] for run in measured),
            "rounds": [run["per_s"] for run in measured],
            "jain": statistics.median(run["jain"] for run in measured),
            "turns_last_round": measured[-1]["turns"],
            "lock_p50_ms": statistics.median(run["lock_p50_ms"] for run in measured),
        }
    ratios = [
        a / b
        for a, b in zip(
            figures["priorities -3..4"]["rounds"], figures["priority 0"]["rounds"], strict=True
        )
    ]
    figures["ratio"] = statistics.median(ratios)
    return figures


def wait_for(
    alias: str, resource: str, priority: int, start_at: float, hold: float
) -> tuple[float, float]:
    """At ``start_at``: ``lock(resource, timeout=60, priority=...)``, hold it
    ``hold`` s; when it asked and when it got it (``time.monotonic()``)."""
    from django_dlock import lock

    time.sleep(max(start_at - time.monotonic(), 0))
    asked = time.monotonic()
    with lock(resource, using=alias, ttl=30, timeout=60, priority=priority):
        got = time.monotonic()
        time.sleep(hold)
    return asked, got


def in_background(pool: Pool, tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> Any:
    """Run ``tasks`` on ``pool`` in a thread; ``.join()`` then ``.results``."""
    runner = threading.Thread(target=lambda: setattr(runner, "results", pool.run(tasks)))
    runner.start()
    return runner


def late_high_priority(pool: Pool, alias: str, trials: int) -> dict[str, Any]:
    """This process holds a resource; ``LOW_WAITERS`` processes queue for it
    (priority 0, 50 ms apart), then one of priority 1; then the holder
    releases. Where the last comer's turn fell (1: the next hand-over), and
    how long after the release it got the lock; the same with priority 0 as
    the reference."""
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects.db_manager(alias)
    found: dict[str, list[tuple[int, float]]] = {"priority 1": [], "priority 0": []}
    for trial in range(trials):
        for name, priority in (("priority 1", 1), ("priority 0", 0)):
            resource = f"late:{trial}:{time.time_ns()}"
            if locks.acquire(resource, owner="holder", ttl=30) is None:
                raise RuntimeError(f"{resource} was not free")
            start_at = time.monotonic() + 0.5
            tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
                (wait_for, (alias, resource, 0, start_at + 0.05 * n, 0.02))
                for n in range(LOW_WAITERS)
            ]
            late = start_at + 0.05 * LOW_WAITERS + 0.1
            tasks.append((wait_for, (alias, resource, priority, late, 0.02)))
            runner = in_background(pool, tasks)
            time.sleep(max(late + 0.3 - time.monotonic(), 0))
            released = time.monotonic()
            locks.release(resource, owner="holder")
            runner.join()
            gots = sorted(got for _, got in runner.results)
            last_got = runner.results[-1][1]
            found[name].append((gots.index(last_got) + 1, last_got - released))
    return {
        name: {
            "places": [place for place, _ in trials_found],
            "after_release_ms": [round(after * 1000, 2) for _, after in trials_found],
            "after_release_p50_ms": statistics.median(a for _, a in trials_found) * 1000,
        }
        for name, trials_found in found.items()
    }
