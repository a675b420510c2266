"""Waits that the features of issue 36 shape: when a waiter gets a lock after
a lock-delay, what waiting costs while holding another lock (the deadlock
look), and how soon a deadlock raises ``LockDeadlock``.

The waiters run in ``kinds_crowds.Pool``'s processes (a lock held by another
thread of the same process is invisible to the deadlock look); this process
holds, releases and force-releases. Times are ``time.monotonic()``, one clock
for every process of the host.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.features_crowds import in_background, wait_for
from benchmarks.kinds_crowds import Pool

DELAY = 1.0  # the lock-delay measured, seconds


def _locks(alias: str) -> Any:
    from django_dlock.models import DistributedLock

    return DistributedLock.objects.db_manager(alias)


def _spread(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[min(int(len(ordered) * 0.9), len(ordered) - 1)] * 1000,
        "max_ms": ordered[-1] * 1000,
        "samples_ms": [round(v * 1000, 2) for v in values],
    }


def lock_delay_accuracy(pool: Pool, alias: str, trials: int) -> dict[str, Any]:
    """A waiter queued in ``lock()`` while the holder (of ``lock_delay=DELAY``)
    is force-released, or lets its 1 s lease run out: how long after the
    delay's end (by this host's clock) the waiter got the lock. The reference:
    a force-release without a delay (the waiter's wake-up after a loss)."""
    locks = _locks(alias)
    found: dict[str, list[float]] = {
        "force-released, lock_delay=1": [],
        "lease ran out (ttl 1 s), lock_delay=1": [],
        "force-released, no lock_delay": [],
    }
    for trial in range(trials):
        print(f"  features: {alias} lock-delay trial {trial + 1}/{trials}", file=sys.stderr)
        for name in found:
            resource = f"delay:{trial}:{time.time_ns()}"
            expires = "lease" in name
            delay = 0.0 if "no lock_delay" in name else DELAY
            before = time.monotonic()
            taken = locks.acquire(
                resource, owner="holder", ttl=1 if expires else 30, lock_delay=delay or None
            )
            lost_at = (before + time.monotonic()) / 2 + 1.0  # the lease's end, if it runs out
            if taken is None:
                raise RuntimeError(f"{resource} was not free")
            start_at = time.monotonic() + 0.2
            runner = in_background(pool, [(wait_for, (alias, resource, 0, start_at, 0.0))])
            if not expires:
                time.sleep(max(start_at + 0.3 - time.monotonic(), 0))
                before = time.monotonic()
                locks.force_release(resource)
                lost_at = (before + time.monotonic()) / 2
            runner.join()
            ((_, got),) = runner.results
            found[name].append(got - (lost_at + delay))
    return {name: _spread(values) for name, values in found.items()}


def wait_holding(
    alias: str, resource: str, holding: str | None, start_at: float
) -> tuple[float, float]:
    """At ``start_at``: ``lock(resource, timeout=60)``, within ``lock(holding)``
    when given; the process's CPU seconds from the call to the lock, and when
    it got it (``time.monotonic()``)."""
    from contextlib import nullcontext

    from django_dlock import lock

    outer = lock(holding, using=alias, ttl=30) if holding else nullcontext()
    with outer:
        time.sleep(max(start_at - time.monotonic(), 0))
        cpu = time.process_time()
        with lock(resource, using=alias, ttl=30, timeout=60):
            got = time.monotonic()
            used = time.process_time() - cpu
    return used, got


def waiting_cost(
    pool: Pool,
    alias: str,
    trials: int,
    wait: float,
    server_cpu: Callable[[], float] | None,
) -> dict[str, Any]:
    """A waiter blocked ``wait`` s on a lock this process holds, holding
    another lock (it writes what it holds, and looks for a cycle every 0.25 s)
    or nothing, in turn: its process's CPU and the server's per second of
    waiting, and its wake-up after the release."""
    locks = _locks(alias)
    runs: dict[str, list[dict[str, float]]] = {"holding nothing": [], "holding another lock": []}
    for trial in range(trials):
        print(f"  features: {alias} waiting-cost trial {trial + 1}/{trials}", file=sys.stderr)
        for name in runs:
            resource = f"held:{trial}:{time.time_ns()}"
            holding = f"{resource}:other" if "another" in name else None
            locks.acquire(resource, owner="holder", ttl=30)
            start_at = time.monotonic() + 0.3
            runner = in_background(pool, [(wait_holding, (alias, resource, holding, start_at))])
            time.sleep(max(start_at + 0.05 - time.monotonic(), 0))
            server = server_cpu() if server_cpu else None
            time.sleep(wait)
            if server is not None and server_cpu is not None:
                server = server_cpu() - server
            released = time.monotonic()
            locks.release(resource, owner="holder")
            runner.join()
            ((client, got),) = runner.results
            runs[name].append(
                {
                    "client_cpu_ms_per_s": client * 1000 / (got - start_at),
                    "server_cpu_ms_per_s": (server or 0.0) * 1000 / wait,
                    "wake_ms": (got - released) * 1000,
                }
            )
    return {
        name: {
            key: statistics.median(run[key] for run in measured)
            for key in ("client_cpu_ms_per_s", "server_cpu_ms_per_s", "wake_ms")
        }
        | {"server_measured": server_cpu is not None}
        for name, measured in runs.items()
    }


def deadlocker(alias: str, first: str, second: str, ask_at: float) -> dict[str, Any]:
    """Hold ``first``; at ``ask_at`` ask for ``second`` (timeout 10 s). When it
    asked, and when it got ``second`` or raised ``LockDeadlock``."""
    from django_dlock import LockDeadlock, lock

    with lock(first, using=alias, ttl=30, timeout=10):
        time.sleep(max(ask_at - time.monotonic(), 0))
        asked = time.monotonic()
        try:
            with lock(second, using=alias, ttl=30, timeout=10):
                return {"asked": asked, "got": time.monotonic(), "deadlock": None}
        except LockDeadlock:
            return {"asked": asked, "got": None, "deadlock": time.monotonic()}


def deadlock_detection(pool: Pool, alias: str, trials: int) -> dict[str, Any]:
    """Two processes take ``a`` and ``b`` in opposite orders; the second asks
    0.1 s after the first, closing the cycle. From that moment to
    ``LockDeadlock``, and to the survivor's lock."""
    raised: list[float] = []
    survived: list[float] = []
    for trial in range(trials):
        a, b = f"dl:{trial}:{time.time_ns()}:a", f"dl:{trial}:{time.time_ns()}:b"
        ask_at = time.monotonic() + 0.5
        first, second = pool.run(
            [(deadlocker, (alias, a, b, ask_at)), (deadlocker, (alias, b, a, ask_at + 0.1))]
        )
        formed = max(first["asked"], second["asked"])
        victims = [one for one in (first, second) if one["deadlock"] is not None]
        if len(victims) != 1:
            raise RuntimeError(f"a deadlock raised in {len(victims)} processes, not one")
        raised.append(victims[0]["deadlock"] - formed)
        survivor = first if victims[0] is second else second
        survived.append(survivor["got"] - formed)
    return {"raised": _spread(raised), "survivor_got": _spread(survived)}
