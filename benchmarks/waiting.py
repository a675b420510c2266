"""What waiting in ``lock()`` costs: wake-up, fairness, idle load, connections, renewals.

    DATABASE_URL=postgres://... python -m benchmarks.waiting   # or sqlite:////tmp/bench.sqlite3
    BENCH_WAITERS=200 python -m benchmarks.waiting             # fewer async waiters

Every figure comes from separate OS processes against one database, as separate
hosts would use it:

- wake-up: a holder keeps the lock 0.3-1.2 s and releases it; the time from the
  release's return to the blocked waiter's block starting (``time.monotonic()`` is
  one clock for every process of the host).
- fairness: 8 processes take turns holding the lock 1 ms, beside one process alone
  doing the same (the ideal), in interleaved rounds; the median share of the
  ideal, and Jain's index of the turns per process.
- idle (PostgreSQL): the statements per second that one waiter blocked on a
  held lock sends once queued (counted by an execute wrapper in its process).
- async crowd: N ``async with lock(...)`` waiters in one process on a held lock:
  the most connections (``pg_stat_activity``) and threads seen, and how each ended.
- release (PostgreSQL): what looking for a waiter to wake costs a release that
  has none, beside the plain release, interleaved in one process.
- renewals: 100 ``auto_renew=True`` locks in one process held 4x their ttl: the
  extra connections and threads, and how many were lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from benchmarks.acquire import configure, psycopg_connection

WAKE_ROUNDS = int(os.environ.get("BENCH_WAKE_ROUNDS", "20"))
TURN_SECONDS = float(os.environ.get("BENCH_TURN_SECONDS", "3"))
FAIR_ROUNDS = int(os.environ.get("BENCH_FAIR_ROUNDS", "5"))
IDLE_SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS", "10"))
WAITERS = int(os.environ.get("BENCH_WAITERS", "1000"))
RENEWED = int(os.environ.get("BENCH_RENEWED", "100"))

spawn = multiprocessing.get_context("spawn")


def run(target: Callable[..., Any], *args: Any) -> Any:
    """``target(*args)`` in a new spawned process; its result (or its exception)."""
    results: Any = spawn.Queue()
    process = spawn.Process(target=_call, args=(results, target, args), daemon=True)
    process.start()
    return results, process


def _call(results: Any, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    configure()
    try:
        results.put((True, target(*args)))
    except BaseException as error:
        results.put((False, repr(error)))


def result(handle: tuple[Any, Any], timeout: float = 300) -> Any:
    results, process = handle
    ok, value = results.get(timeout=timeout)
    process.join(10)
    if not ok:
        raise RuntimeError(value)
    return value


# -- wake-up -----------------------------------------------------------------------


def wake_waiter(resource: str, rounds: int, go: Any) -> list[float]:
    """Block in ``lock()`` once per round; the monotonic time each block began."""
    from django_dlock import lock

    began: list[float] = []
    for number in range(rounds):
        go.acquire()
        with lock(f"{resource}:{number}", ttl=30, timeout=30):
            began.append(time.monotonic())
    return began


def wake_up() -> list[float]:
    """Milliseconds from each release to the waiter holding the lock."""
    from django_dlock.models import DistributedLock, LockWaiter

    locks, rng = DistributedLock.objects, random.Random(7)
    go = spawn.Semaphore(0)
    waiter = run(wake_waiter, "wake", WAKE_ROUNDS, go)
    released: list[float] = []
    for number in range(WAKE_ROUNDS):
        resource = f"wake:{number}"
        locks.acquire(resource, "holder", ttl=60)
        go.release()
        deadline = time.monotonic() + 60
        while not LockWaiter.objects.filter(resource=resource).exists():
            if time.monotonic() > deadline or not waiter[1].is_alive():
                result(waiter, timeout=1)  # raises the waiter's error
                raise RuntimeError("the waiter never queued")
            time.sleep(0.005)
        time.sleep(rng.uniform(0.3, 1.2))
        locks.release(resource, "holder")
        released.append(time.monotonic())
    began = result(waiter)
    return [(b - r) * 1000 for b, r in zip(began, released, strict=True)]


# -- fairness ----------------------------------------------------------------------


def take_turns(resource: str, start: Any, seconds: float, hold: float) -> int:
    """Take the lock again and again for ``seconds``, holding it ``hold`` s; the turns."""
    from django_dlock import lock

    turns = 0
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with lock(resource, ttl=30, timeout=60):
            time.sleep(hold)
            turns += 1
    return turns


def fairness(processes: int = 8, hold: float = 0.001) -> tuple[list[float], float, list[int]]:
    """(the share of the ideal throughput in each of ``FAIR_ROUNDS`` rounds,
    the median round's Jain's index and turns per process). Each round runs the
    ideal and then the 8 processes, so that a share compares two runs a few
    seconds apart on this shared machine."""
    shares: list[tuple[float, float, list[int]]] = []
    for _ in range(FAIR_ROUNDS):
        alone_start = spawn.Barrier(1)  # kept referenced until the worker is done with it
        alone = result(run(take_turns, "fair:alone", alone_start, TURN_SECONDS, hold))
        start = spawn.Barrier(processes)
        handles = [run(take_turns, "fair:8", start, TURN_SECONDS, hold) for _ in range(processes)]
        counts = [result(handle) for handle in handles]
        jain = sum(counts) ** 2 / (processes * sum(count * count for count in counts))
        shares.append((sum(counts) / alone, jain, counts))
    _, jain, counts = sorted(shares, key=lambda share: share[0])[len(shares) // 2]
    return [share for share, _, _ in shares], jain, counts


# -- idle load ---------------------------------------------------------------------


def idle_waiter(resource: str, seconds: float) -> list[float]:
    """Wait for ``resource`` (held all along); when each statement was sent
    (``time.monotonic()``), counted by an execute wrapper on the waiter's
    connection. (The listener's connection sends nothing while it waits.)"""
    from django.db import connection

    from django_dlock import LockNotAcquired, lock

    sent: list[float] = []

    def counted(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        sent.append(time.monotonic())
        return execute(sql, *args)

    with (
        connection.execute_wrapper(counted),
        contextlib.suppress(LockNotAcquired),
        lock(resource, ttl=30, timeout=seconds),
    ):
        raise AssertionError("the lock stays held")
    return sent


def idle_load() -> tuple[int, float]:
    """The statements one waiter blocked on a held lock sends per second, once
    queued (the first 2 s: queuing and listening; the last: leaving)."""
    from django_dlock.models import DistributedLock

    DistributedLock.objects.acquire("idle", "holder", ttl=120)
    sent = result(run(idle_waiter, "idle", IDLE_SECONDS + 3))
    DistributedLock.objects.release("idle", "holder")
    window = [moment for moment in sent if sent[0] + 2 <= moment < sent[0] + 2 + IDLE_SECONDS]
    return len(sent), len(window) / IDLE_SECONDS


# -- async crowd -------------------------------------------------------------------


def async_crowd(resource: str, waiters: int, timeout: float, ready: Any) -> dict[str, int]:
    """``waiters`` tasks each ``async with lock(...)``; how they ended, most threads."""
    from django_dlock import LockNotAcquired, lock

    ends: dict[str, int] = {}
    most_threads = threading.active_count()

    async def wait() -> None:
        try:
            async with lock(resource, ttl=10, timeout=timeout):
                await asyncio.sleep(0.001)
            outcome = "acquired"
        except LockNotAcquired:
            outcome = "LockNotAcquired"
        except Exception as error:
            outcome = type(error).__name__
        ends[outcome] = ends.get(outcome, 0) + 1

    async def crowd() -> None:
        nonlocal most_threads
        tasks = [asyncio.create_task(wait()) for _ in range(waiters)]
        ready.set()
        while not all(task.done() for task in tasks):
            most_threads = max(most_threads, threading.active_count())
            await asyncio.sleep(0.05)

    asyncio.run(crowd())
    return {**ends, "threads": most_threads}


def client_connections(exclude_pid: int) -> int:
    with psycopg_connection(autocommit=True) as raw:
        row = raw.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid NOT IN (pg_backend_pid(), %s)",
            [exclude_pid],
        ).fetchone()
    return int(row[0])


def crowd(vendor: str) -> dict[str, int]:
    from django.db import connection

    from django_dlock.models import DistributedLock

    DistributedLock.objects.acquire("crowd", "holder", ttl=120)
    own_pid = _backend_pid(connection) if vendor == "postgresql" else 0
    ready = spawn.Event()
    handle = run(async_crowd, "crowd", WAITERS, 30.0, ready)
    ready.wait(120)
    most = 0
    until = time.monotonic() + 3
    while time.monotonic() < until:  # the crowd waits on the held lock
        if vendor == "postgresql":
            most = max(most, client_connections(own_pid))
        time.sleep(0.1)
    DistributedLock.objects.release("crowd", "holder")
    results, process = handle
    while process.is_alive() and results.empty():
        if vendor == "postgresql":
            most = max(most, client_connections(own_pid))
        time.sleep(0.1)
    return {**result(handle), "connections": most}


def _backend_pid(connection: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


# -- renewals ----------------------------------------------------------------------


def hold_renewed(count: int, ttl: float, holding: Any, done: Any) -> dict[str, int]:
    """Hold ``count`` auto-renewed locks 4x their ttl; extra threads, how many lost."""
    from django.db import connection

    from django_dlock import lock

    connection.close()
    threads_before = threading.active_count()
    with contextlib.ExitStack() as stack:
        handles = [
            stack.enter_context(_ExitQuietly(lock(f"renewed:{n}", ttl=ttl, auto_renew=True)))
            for n in range(count)
        ]
        connection.close()  # this thread's own connection is not an extra one
        holding.set()
        most_threads = threading.active_count()
        until = time.monotonic() + 4 * ttl
        while time.monotonic() < until:
            most_threads = max(most_threads, threading.active_count())
            time.sleep(0.05)
        lost = sum(handle.is_lost for handle in handles)
        done.set()
    return {"extra threads": most_threads - threads_before, "lost": lost}


class _ExitQuietly:
    """A ``lock()`` whose exit does not raise for a lost lock (it is counted)."""

    def __init__(self, context: Any) -> None:
        self.context = context

    def __enter__(self) -> Any:
        return self.context.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        from django_dlock import LockExpired, LockNotOwned

        with contextlib.suppress(LockExpired, LockNotOwned):
            self.context.__exit__(*exc_info)


def renewals(vendor: str) -> dict[str, int]:
    from django.db import connection

    own_pid = _backend_pid(connection) if vendor == "postgresql" else 0
    before = client_connections(own_pid) if vendor == "postgresql" else 0
    holding, done = spawn.Event(), spawn.Event()
    handle = run(hold_renewed, RENEWED, 1.5, holding, done)
    holding.wait(120)
    most = 0
    while not done.is_set():
        if vendor == "postgresql":
            most = max(most, client_connections(own_pid) - before)
        time.sleep(0.1)
    return {**result(handle), "extra connections": most}


# -- what a release without waiters costs ------------------------------------------


def release_cost(rounds: int = 7, cycles: int = 200) -> tuple[float, float]:
    """Acquire + release cycles per second with nobody waiting: the release's
    plain UPDATE beside the one that also looks for a head to wake (PostgreSQL),
    interleaved in rounds in this process; the medians."""
    from django_dlock.backends import LockBackend, backend_for
    from django_dlock.models import DistributedLock

    backend = backend_for("default")
    locks = DistributedLock.objects

    def per_second(plain: bool) -> float:
        if plain:  # the base class's release: an UPDATE of the row, nothing else
            backend.mark_released = lambda row: LockBackend.mark_released(backend, row)  # type: ignore[method-assign]
        try:
            started = time.perf_counter()
            for n in range(cycles):
                locks.acquire(f"release:{n % 20}", "me", ttl=30)
                locks.release(f"release:{n % 20}", "me")
            return cycles / (time.perf_counter() - started)
        finally:
            vars(backend).pop("mark_released", None)

    plain, waking = [], []
    for _ in range(rounds):
        plain.append(per_second(plain=True))
        waking.append(per_second(plain=False))
    return statistics.median(plain), statistics.median(waking)


def acquire_floor(rounds: int = 50) -> float:
    """Milliseconds an uncontended queued acquire of a released lock takes (take
    the lock, leave the queue): the part of a wake-up that is the acquisition."""
    from django_dlock.models import DistributedLock, LockWaiter
    from django_dlock.rules.claim import claim_for
    from django_dlock.service import Refusal, service_for

    locks = DistributedLock.objects
    service = service_for()
    times = []
    for n in range(rounds):
        locks.acquire(f"floor:{n}", "before", ttl=30)
        locks.release(f"floor:{n}", "before")
        ticket = LockWaiter.objects.create(
            resource=f"floor:{n}", owner="me", expires_at=_in_a_minute()
        ).pk
        started = time.monotonic()
        taken = service.take(replace(claim_for(f"floor:{n}", "me", 30), ticket=ticket))
        times.append((time.monotonic() - started) * 1000)
        assert not isinstance(taken, Refusal) and not LockWaiter.objects.filter(pk=ticket).exists()  # noqa: S101
    return statistics.median(times)


def _in_a_minute() -> Any:
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() + timedelta(minutes=1)


# -- main --------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    os.environ.setdefault(
        "DATABASE_URL", f"sqlite:///{tempfile.mkdtemp()}/bench-waiting.sqlite3"
    )  # the worker processes open the same database
    configure()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    vendor = connection.vendor
    sections = (os.environ.get("BENCH_SECTIONS") or "wake,fair,idle,crowd,release,renew").split(",")
    print(f"django-dlock waiting on {vendor}")
    if "wake" in sections:
        latencies = wake_up()
        print(
            f"wake-up after release ({WAKE_ROUNDS} rounds): "
            f"p50 {statistics.median(latencies):.1f} ms, p90 {percentile(latencies, 0.9):.1f} ms, "
            f"max {max(latencies):.1f} ms; an uncontended queued acquire alone takes "
            f"p50 {acquire_floor():.1f} ms"
        )
    if "fair" in sections:
        shares, jain, counts = fairness()
        rounds = ", ".join(f"{share:.0%}" for share in shares)
        print(
            f"8 acquirers, 1 ms hold: median {statistics.median(shares):.0%} of ideal "
            f"({rounds}), Jain {jain:.3f}, turns {counts}"
        )
    if "idle" in sections and vendor == "postgresql":
        total, per_second = idle_load()
        print(
            f"one idle waiter: {per_second:.2f} statements/s once queued "
            f"({total} in all over {IDLE_SECONDS + 3:.0f} s, queuing and leaving included)"
        )
    if "crowd" in sections:
        print(f"{WAITERS} async waiters in one process: {crowd(vendor)}")
    if "release" in sections and vendor == "postgresql":
        plain, waking = release_cost()
        print(
            f"acquire + release without waiters: {plain:.0f}/s with a plain UPDATE, "
            f"{waking:.0f}/s with the head check ({waking / plain:.0%})"
        )
    if "renew" in sections:
        print(f"{RENEWED} auto-renewed locks in one process: {renewals(vendor)}")


if __name__ == "__main__":
    main()
