"""Many processes on one resource: 8 readers beside a writer, 16 processes on a
semaphore of 4 permits. Each figure is a share of a reference measured in the
same round a few seconds earlier, on this shared machine.

The processes are spawned once (``Pool``) and configured as the parent is
(``kinds_setup.configure``); the parent hands them turns to take. They start
together at a moment of ``time.monotonic()``, which is one clock for every
process of the host.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.clients import jain

spawn = multiprocessing.get_context("spawn")
HOLD = 0.001  # seconds each turn holds the lock
# The writer writes about once every this many holds: often enough to sample
# its wait many times, rarely enough that the readers' figure is their overlap.
WRITER_PAUSE_HOLDS = 10
READERS = 8
PROCESSES = 16
LIMIT = 4


class Pool:
    """``size`` spawned processes that run ``(function, args)`` tasks."""

    def __init__(self, size: int) -> None:
        self.results: Any = spawn.Queue()
        self.inboxes: list[Any] = [spawn.Queue() for _ in range(size)]
        self.processes = [
            spawn.Process(target=_serve, args=(inbox, self.results), daemon=True)
            for inbox in self.inboxes
        ]
        for process in self.processes:
            process.start()
        for _ in self.processes:  # each configured, its connections open
            index, ok, value = self.results.get(timeout=600)
            if not ok:
                raise RuntimeError(f"a worker did not start: {value}")

    def run(self, tasks: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """Task ``i`` in process ``i``; their results in that order."""
        for index, task in enumerate(tasks):
            self.inboxes[index].put((index, *task))
        answers: dict[int, Any] = {}
        for _ in tasks:
            index, ok, value = self.results.get(timeout=600)
            if not ok:
                raise RuntimeError(f"worker {index}: {value}")
            answers[index] = value
        return [answers[index] for index in range(len(tasks))]

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(30)
            if process.is_alive():
                process.terminate()  # our own worker, by its handle


def _serve(inbox: Any, results: Any) -> None:
    from django.db import connections

    from benchmarks import kinds_setup

    try:
        for alias in kinds_setup.configure():
            connections[alias].ensure_connection()
    except Exception as error:
        results.put((-1, False, repr(error)))
        return
    results.put((-1, True, None))
    while (task := inbox.get()) is not None:
        index, function, args = task
        try:
            results.put((index, True, function(*args)))
        except Exception as error:
            results.put((index, False, repr(error)))


def take_turns(
    alias: str,
    resource: str,
    kind: dict[str, Any],
    start_at: float,
    seconds: float,
    pause: float = 0.0,
) -> dict[str, Any]:
    """From ``start_at`` for ``seconds``: ``lock(resource, **kind)``, hold it
    ``HOLD`` s, again (after ``pause`` s); each turn's wait, hold
    (``time.monotonic()``) and release (seconds)."""
    from django_dlock import lock

    with lock(f"warm:{os.getpid()}", using=alias, ttl=30, timeout=30):
        pass  # the connection and the listener are up before the start
    late = time.monotonic() - start_at
    if late > seconds / 10:
        raise RuntimeError(f"this process was ready {late:.2f} s after the start")
    time.sleep(max(-late, 0))
    ends = start_at + seconds
    waits: list[float] = []
    holds: list[tuple[float, float]] = []
    releases: list[float] = []
    while time.monotonic() < ends:
        asked = time.monotonic()
        with lock(resource, using=alias, ttl=30, timeout=60, **kind):
            got = time.monotonic()
            time.sleep(HOLD)
            left = time.monotonic()
        if got < ends:
            waits.append(got - asked)
            holds.append((got, left))
            releases.append(time.monotonic() - left)
        if pause:
            time.sleep(pause)
    return {"turns": len(holds), "waits": waits, "holds": holds, "releases": releases}


def _together(
    pool: Pool, alias: str, kinds: list[tuple[str, dict[str, Any], float]], seconds: float
) -> list[dict[str, Any]]:
    """Process ``i`` takes turns as ``kinds[i]`` = (resource, kind, pause) says."""
    start_at = time.monotonic() + 1.0
    return pool.run(
        [
            (take_turns, (alias, resource, kind, start_at, seconds, pause))
            for resource, kind, pause in kinds
        ]
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def most_at_once(holds: list[tuple[float, float]]) -> int:
    """The most holds that overlapped at one moment."""
    events = sorted([(got, 1) for got, _ in holds] + [(left, -1) for _, left in holds])
    most = current = 0
    for _, step in events:
        current += step
        most = max(most, current)
    return most


def readers_and_writer(pool: Pool, alias: str, rounds: int, seconds: float) -> dict[str, Any]:
    """Each round: one reader alone, then ``READERS`` readers beside one writer
    (1 ms holds each); the readers' turns per second as a multiple of the one
    alone's, and the writer's waits in holds."""
    ratios, alone_rates, crowd_rates, writer_waits = [], [], [], []
    overlap_mean, overlap_most = [], []
    reader_waits, reader_releases, alone_waits, alone_releases = [], [], [], []
    for number in range(rounds):
        print(f"  kinds: {alias} readers round {number + 1}/{rounds}", file=sys.stderr)
        [alone] = _together(pool, alias, [(f"rw-alone:{number}", {"shared": True}, 0.0)], seconds)
        resource = f"rw:{number}"
        kinds = [(resource, {"shared": True}, 0.0)] * READERS
        kinds.append((resource, {}, WRITER_PAUSE_HOLDS * HOLD))
        *readers, writer = _together(pool, alias, kinds, seconds)
        reader_holds = [hold for reader in readers for hold in reader["holds"]]
        crowd = len(reader_holds) / seconds
        alone_rates.append(alone["turns"] / seconds)
        crowd_rates.append(crowd)
        ratios.append(crowd / max(alone_rates[-1], 1 / seconds))
        writer_waits += writer["waits"]
        alone_waits += alone["waits"]
        alone_releases += alone["releases"]
        for reader in readers:
            reader_waits += reader["waits"]
            reader_releases += reader["releases"]
        overlap_mean.append(sum(left - got for got, left in reader_holds) / seconds)
        overlap_most.append(most_at_once(reader_holds))
    return {
        "rounds": ratios,
        "readers_x_single": statistics.median(ratios),
        "single_reader_per_s": statistics.median(alone_rates),
        "readers_per_s": statistics.median(crowd_rates),
        "readers_at_once_mean": statistics.median(overlap_mean),
        "readers_at_once_most": max(overlap_most),
        "reader_lock_ms_p50": _ms(alone_waits, reader_waits),
        "reader_release_ms_p50": _ms(alone_releases, reader_releases),
        "writer_turns": len(writer_waits),
        "writer_wait_p50_holds": percentile(writer_waits, 0.5) / HOLD,
        "writer_wait_p99_holds": percentile(writer_waits, 0.99) / HOLD,
        "writer_wait_max_holds": max(writer_waits) / HOLD,
    }


def semaphore(pool: Pool, alias: str, rounds: int, seconds: float) -> dict[str, Any]:
    """Each round: one process alone on a semaphore of ``LIMIT`` (the ideal is
    ``LIMIT`` times its rate: every permit always busy), ``LIMIT`` processes
    (never queued: what the cores allow), then ``PROCESSES`` processes."""
    shares: list[tuple[float, float, float, list[int]]] = []
    alone_waits, alone_releases, crowd_waits, crowd_releases = [], [], [], []
    for number in range(rounds):
        print(f"  kinds: {alias} semaphore round {number + 1}/{rounds}", file=sys.stderr)
        kind = {"limit": LIMIT}
        [alone] = _together(pool, alias, [(f"sem-alone:{number}", kind, 0.0)], seconds)
        fits = _together(pool, alias, [(f"sem-fits:{number}", kind, 0.0)] * LIMIT, seconds)
        crowd = _together(pool, alias, [(f"sem:{number}", kind, 0.0)] * PROCESSES, seconds)
        turns = [one["turns"] for one in crowd]
        alone_waits += alone["waits"]
        alone_releases += alone["releases"]
        for one in crowd:
            crowd_waits += one["waits"]
            crowd_releases += one["releases"]
        ideal = LIMIT * alone["turns"]
        fitting = sum(one["turns"] for one in fits)
        shares.append(
            (sum(turns) / max(ideal, 1), sum(turns) / max(fitting, 1), jain(turns), turns)
        )
    share, of_fitting, fairness, turns = sorted(shares, key=lambda s: s[0])[len(shares) // 2]
    return {
        "rounds": [s[0] for s in shares],
        "share_of_ideal": share,
        "share_of_limit_processes": of_fitting,
        "jain": fairness,
        "turns": turns,
        "per_s": sum(turns) / seconds,
        "lock_ms_p50": _ms(alone_waits, crowd_waits),
        "release_ms_p50": _ms(alone_releases, crowd_releases),
    }


def _ms(alone: list[float], crowd: list[float]) -> list[float]:
    """The medians, in milliseconds, of one process alone and of the crowd."""
    return [statistics.median(alone) * 1000, statistics.median(crowd) * 1000]
