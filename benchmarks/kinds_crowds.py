"""Many processes on one resource: 8 readers beside a writer, 16 processes on a
semaphore of 4 permits. Each figure is a share of a reference measured in the
same round a few seconds earlier, on this shared machine.

The processes are spawned once (``Pool``) and configured as the parent is
(``kinds_setup.configure``); the parent hands them turns to take. They start
together at a moment of ``time.monotonic()``, which is one clock for every
process of the host.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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
        failures: list[str] = []
        for _ in tasks:  # every answer, so that none is left for the next run
            index, ok, value = self.results.get(timeout=600)
            answers[index] = value
            if not ok:
                failures.append(f"worker {index}: {value}")
        if failures:
            raise RuntimeError("; ".join(failures))
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
    (``time.monotonic()``) and release (seconds), and this process's CPU and
    statements (those its lock operations ran, BEGIN and COMMIT aside)."""
    from django.db import connections

    from django_dlock import lock

    with lock(f"warm:{os.getpid()}", using=alias, ttl=30, timeout=30):
        pass  # the connection and the listener are up before the start
    late = time.monotonic() - start_at
    if late > seconds / 10:
        raise RuntimeError(f"this process was ready {late:.2f} s after the start")
    time.sleep(max(-late, 0))
    ends, cpu, statements = start_at + seconds, time.process_time(), [0]
    asks: list[float] = []
    waits: list[float] = []
    holds: list[tuple[float, float]] = []
    releases: list[float] = []

    def counted(execute: Callable[..., Any], *args: Any) -> Any:
        statements[0] += 1
        return execute(*args)

    with connections[alias].execute_wrapper(counted):
        while time.monotonic() < ends:
            asked = time.monotonic()
            with lock(resource, using=alias, ttl=30, timeout=60, **kind):
                got = time.monotonic()
                time.sleep(HOLD)
                left = time.monotonic()
            asks.append(asked)
            waits.append(got - asked)  # also one that ended after the run: a long wait counts
            if got < ends:
                holds.append((got, left))
                releases.append(time.monotonic() - left)
            if pause:
                time.sleep(pause)
    return {
        "asks": asks,
        "waits": waits,
        "holds": holds,
        "releases": releases,
        "cpu": time.process_time() - cpu,
        "statements": statements[0],
    }


@dataclass
class Turns:
    """What processes that took turns together did."""

    seconds: float
    turns: list[int]  # per process
    asks: list[float]  # when each lock() began (time.monotonic())
    waits: list[float]  # how long each took
    holds: list[tuple[float, float]]
    releases: list[float]
    client_cpu: float  # seconds, all the processes
    server_cpu: float | None
    statements: int

    @property
    def per_s(self) -> float:
        return sum(self.turns) / self.seconds

    def figures(self) -> dict[str, Any]:
        """Medians of a call, in ms; CPU per turn, in ms."""
        turns = max(sum(self.turns), 1)
        return {
            "lock_ms": statistics.median(self.waits) * 1000 if self.waits else None,
            "release_ms": statistics.median(self.releases) * 1000 if self.releases else None,
            "client_cpu_ms": self.client_cpu * 1000 / turns,
            "server_cpu_ms": None if self.server_cpu is None else self.server_cpu * 1000 / turns,
            "statements": self.statements / turns,
        }


def together(
    pool: Pool,
    alias: str,
    kinds: list[tuple[str, dict[str, Any], float]],
    seconds: float,
    server_cpu: Callable[[], float] | None,
) -> list[Turns]:
    """Process ``i`` takes turns as ``kinds[i]`` = (resource, kind, pause) says;
    what each did, with the CPU of all of them and of the server in the last."""
    start_at = time.monotonic() + 1.0
    before = server_cpu() if server_cpu else None
    results = pool.run(
        [
            (take_turns, (alias, resource, kind, start_at, seconds, pause))
            for resource, kind, pause in kinds
        ]
    )
    used = None if before is None or server_cpu is None else server_cpu() - before
    return [
        Turns(
            seconds,
            [len(one["holds"])],
            one["asks"],
            one["waits"],
            one["holds"],
            one["releases"],
            one["cpu"],
            used,
            one["statements"],
        )
        for one in results
    ]


def merged(runs: list[Turns]) -> Turns:
    """The processes of one run together (the server's CPU is the run's)."""
    return Turns(
        runs[0].seconds,
        [turn for run in runs for turn in run.turns],
        [ask for run in runs for ask in run.asks],
        [wait for run in runs for wait in run.waits],
        [hold for run in runs for hold in run.holds],
        [release for run in runs for release in run.releases],
        sum(run.client_cpu for run in runs),
        runs[0].server_cpu,
        sum(run.statements for run in runs),
    )


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return math.nan
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


def _median_round(rounds: list[tuple[float, Turns, Turns]]) -> tuple[float, Turns, Turns]:
    return sorted(rounds, key=lambda round_: round_[0])[len(rounds) // 2]


def readers_and_writer(
    pool: Pool, alias: str, rounds: int, seconds: float, server_cpu: Callable[[], float] | None
) -> dict[str, Any]:
    """Each round: one reader alone, ``READERS`` readers without a writer, then
    ``READERS`` readers beside one writer (1 ms holds each); the readers' turns
    per second as a multiple of the one alone's (and the median round's
    details), the writer's waits in holds (all rounds)."""
    measured: list[tuple[float, Turns, Turns]] = []
    without_writer: list[float] = []
    writer_waits: list[float] = []
    overtaken: list[int] = []
    for number in range(rounds):
        print(f"  kinds: {alias} readers round {number + 1}/{rounds}", file=sys.stderr)
        [alone] = together(
            pool, alias, [(f"rw-alone:{number}", {"shared": True}, 0.0)], seconds, server_cpu
        )
        only = merged(
            together(
                pool, alias, [(f"r:{number}", {"shared": True}, 0.0)] * READERS, seconds, server_cpu
            )
        )
        without_writer.append(only.per_s / max(alone.per_s, 1 / seconds))
        resource = f"rw:{number}"
        kinds = [(resource, {"shared": True}, 0.0)] * READERS
        kinds.append((resource, {}, WRITER_PAUSE_HOLDS * HOLD))
        *readers, writer = together(pool, alias, kinds, seconds, server_cpu)
        crowd = merged(readers)
        crowd.client_cpu += writer.client_cpu  # the run's CPU and statements, per reader turn
        crowd.statements += writer.statements
        measured.append((crowd.per_s / max(alone.per_s, 1 / seconds), alone, crowd))
        writer_waits += writer.waits
        overtaken += overtakers(writer, crowd)
    ratio, alone, crowd = _median_round(measured)
    return {
        "rounds": [round_[0] for round_ in measured],
        "readers_x_single": ratio,
        "without_writer_rounds": without_writer,
        "readers_without_writer_x_single": statistics.median(without_writer),
        "single_reader_per_s": alone.per_s,
        "readers_per_s": crowd.per_s,
        "readers_at_once_mean": sum(left - got for got, left in crowd.holds) / seconds,
        "readers_at_once_most": most_at_once(crowd.holds),
        "alone": alone.figures(),
        "crowd": crowd.figures(),
        "writer_turns": len(writer_waits),
        "writer_wait_p50_holds": percentile(writer_waits, 0.5) / HOLD,
        "writer_wait_p99_holds": percentile(writer_waits, 0.99) / HOLD,
        "writer_wait_max_holds": percentile(writer_waits, 1.0) / HOLD,
        "overtaking_readers_mean": statistics.fmean(overtaken) if overtaken else math.nan,
        "overtaking_readers_most": max(overtaken, default=0),
    }


def overtakers(writer: Turns, readers: Turns) -> list[int]:
    """For each of the writer's waits, the readers that asked after it did and
    got the lock before it (writer preference lets in only those that asked
    before its ticket was queued)."""
    readers_turns = [
        (ask, ask + wait) for ask, wait in zip(readers.asks, readers.waits, strict=True)
    ]
    counts = []
    for asked, wait in zip(writer.asks, writer.waits, strict=True):
        got = asked + wait
        counts.append(sum(asked < ask and admitted < got for ask, admitted in readers_turns))
    return counts


def semaphore(
    pool: Pool, alias: str, rounds: int, seconds: float, server_cpu: Callable[[], float] | None
) -> dict[str, Any]:
    """Each round: one process alone on a semaphore of ``LIMIT`` (the ideal is
    ``LIMIT`` times its rate: every permit always busy), ``LIMIT`` processes
    (never queued: what the cores allow), then ``PROCESSES`` processes; the
    median round."""
    measured: list[tuple[float, Turns, Turns]] = []
    fitting: list[float] = []
    for number in range(rounds):
        print(f"  kinds: {alias} semaphore round {number + 1}/{rounds}", file=sys.stderr)
        kind = {"limit": LIMIT}
        [alone] = together(pool, alias, [(f"sem-alone:{number}", kind, 0.0)], seconds, server_cpu)
        fits = merged(
            together(pool, alias, [(f"sem-fits:{number}", kind, 0.0)] * LIMIT, seconds, server_cpu)
        )
        crowd = merged(
            together(pool, alias, [(f"sem:{number}", kind, 0.0)] * PROCESSES, seconds, server_cpu)
        )
        measured.append((crowd.per_s / max(LIMIT * alone.per_s, 1 / seconds), alone, crowd))
        fitting.append(crowd.per_s / max(fits.per_s, 1 / seconds))
    share, alone, crowd = _median_round(measured)
    return {
        "rounds": [round_[0] for round_ in measured],
        "share_of_ideal": share,
        "share_of_limit_processes": fitting[[m[0] for m in measured].index(share)],
        "jain": jain(crowd.turns),
        "turns": crowd.turns,
        "per_s": crowd.per_s,
        "alone_per_s": alone.per_s,
        "alone": alone.figures(),
        "crowd": crowd.figures(),
    }
