"""Measurements that need several client processes: throughput with N clients,
contention on one resource, and the wake-up of a waiter.

Clients are forked from the benchmark process once its connections are closed,
and each opens its own (``Contender.make`` / ``HotLock`` factories run in the
child). Times across processes are compared on CLOCK_MONOTONIC, which Linux
keeps system-wide.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from multiprocessing import get_context
from typing import Any, Protocol

from benchmarks.contenders import Cycle

_fork = get_context("fork")


def close_connections() -> None:
    from django.db import connections

    connections.close_all()


def jain(counts: list[int]) -> float:
    """Jain's fairness index: 1 when every process got as many turns, 1/n when one got all."""
    total, squares = sum(counts), sum(c * c for c in counts)
    return total * total / (len(counts) * squares) if squares else 0.0


# -- throughput with N clients on their own resources ---------------------------------


def throughput(
    make: Callable[[str], Cycle], clients: int, duration: float, server_cpu: Callable[[], float]
) -> dict[str, float]:
    """Cycles/s of ``clients`` processes together, and server and client CPU per cycle."""
    close_connections()
    start, done = _fork.Barrier(clients + 1), _fork.Barrier(clients + 1)
    results: Any = _fork.Queue()
    processes = [
        _fork.Process(target=_cycle_client, args=(make, f"c{i}", duration, start, done, results))
        for i in range(clients)
    ]
    for process in processes:
        process.start()
    start.wait(120)
    began, cpu_before = time.perf_counter(), server_cpu()
    counts = [results.get(timeout=duration + 120) for _ in processes]
    elapsed, cpu_after = time.perf_counter() - began, server_cpu()
    done.wait(60)
    for process in processes:
        process.join(30)
    cycles = sum(count for count, _ in counts)
    client_cpu = sum(cpu for _, cpu in counts)
    return {
        "cycles_per_s": cycles / elapsed,
        "server_cpu_ms": (cpu_after - cpu_before) * 1000 / max(cycles, 1),
        "client_cpu_ms": client_cpu * 1000 / max(cycles, 1),
    }


def _cycle_client(
    make: Callable[[str], Cycle], prefix: str, duration: float, start: Any, done: Any, results: Any
) -> None:
    cycle = make(prefix)
    for n in range(10):  # connect, create the rows
        cycle(n)
    start.wait(120)
    cpu, ends, n = time.process_time(), time.perf_counter() + duration, 0
    while time.perf_counter() < ends:
        cycle(n)
        n += 1
    results.put((n, time.process_time() - cpu))
    done.wait(120)  # connections stay open until the server's CPU was read


# -- one resource, many processes ------------------------------------------------------


class HotLock(Protocol):
    def try_acquire(self) -> bool: ...
    def acquire(self, timeout: float) -> bool: ...
    def release(self) -> None: ...


def contention(
    make: Callable[[str], HotLock], blocking: bool, processes: int, duration: float, hold: float
) -> dict[str, Any]:
    """``processes`` processes take turns on one resource for ``duration``,
    holding it ``hold`` seconds each turn: acquisitions/s and Jain's index."""
    close_connections()
    start = _fork.Barrier(processes + 1)
    results: Any = _fork.Queue()
    workers = [
        _fork.Process(
            target=_contender, args=(make, f"p{i}", blocking, duration, hold, start, results)
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    start.wait(120)
    outcomes = [results.get(timeout=duration + 120) for _ in workers]
    for worker in workers:
        worker.join(30)
    turns = [turns for turns, _ in outcomes]
    return {
        "acquisitions_per_s": sum(turns) / duration,
        "attempts_per_s": sum(attempts for _, attempts in outcomes) / duration,
        "jain": jain(turns),
        "turns": turns,
    }


def _contender(
    make: Callable[[str], HotLock],
    owner: str,
    blocking: bool,
    duration: float,
    hold: float,
    start: Any,
    results: Any,
) -> None:
    hot = make(owner)
    start.wait(120)
    ends, turns, attempts = time.perf_counter() + duration, 0, 0
    while time.perf_counter() < ends:
        attempts += 1
        got = hot.acquire(max(ends - time.perf_counter(), 0.01)) if blocking else hot.try_acquire()
        if got:
            time.sleep(hold)
            hot.release()
            turns += 1
    results.put((turns, attempts))


# -- wake-up: how soon a waiter gets the lock its holder released ----------------------


def wakeup(make: Callable[[str], HotLock], samples: int, hold: tuple[float, float]) -> list[float]:
    """Seconds from the holder's release call to the waiter's acquire returning."""
    return [from_call for from_call, _ in wakeup_times(make, samples, hold)]


def wakeup_times(
    make: Callable[[str], HotLock], samples: int, hold: tuple[float, float]
) -> list[tuple[float, float]]:
    """For each sample: seconds from the holder's release call, and from its
    return, to the waiter's acquire returning (on a durable database the
    release's own commit lies between the two)."""
    close_connections()
    go, acquired = _fork.Queue(), _fork.Queue()
    waiter = _fork.Process(target=_waiter, args=(make, go, acquired))
    waiter.start()
    holder = make("holder")
    times = []
    try:
        for _ in range(samples):
            if not holder.try_acquire():
                raise RuntimeError("the holder could not take the free lock")
            go.put(True)
            time.sleep(random.uniform(*hold))  # the waiter is in acquire() by now
            called = time.monotonic()
            holder.release()
            returned = time.monotonic()
            got = acquired.get(timeout=60)
            times.append((got - called, got - returned))
    finally:
        go.put(False)
        waiter.join(30)
    return times


def _waiter(make: Callable[[str], HotLock], go: Any, acquired: Any) -> None:
    hot = make("waiter")
    while go.get():
        if not hot.acquire(30):
            raise RuntimeError("the waiter did not get the lock within 30 s")
        got = time.monotonic()
        hot.release()  # before reporting: the holder takes the lock again next
        acquired.put(got)
