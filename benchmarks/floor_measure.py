"""The arithmetic of ``benchmarks.floor``: rounds of cycles, what each cost the
client, the server and (PostgreSQL) each statement, their medians beside the
floor's, and the goals of issue 45 judged.

A round runs one contender's cycles and reads, before and after: wall and
process time (the client's CPU), the CPU of the connection's server process
(PostgreSQL's backend, from ``/proc/<pid>/stat``), the CPU of the whole server
(the postmaster and all its children, or mariadbd), and pg_stat_statements.
Contenders run in interleaved rounds. Speed (wall time per cycle) is the
median round's, and ``x_floor`` the ratio of the medians; beside it the
rounds' own ratios to the floor's round next to them (least, median, most),
since the machine's noise comes in bursts. A CPU cost is all rounds' together
over all their cycles: the kernel counts CPU in ticks (``SC_CLK_TCK``), too
coarse for one round's, and CPU time suffers less from the neighbours' bursts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cpu import _TICK
from benchmarks.floor_sql import Cycle

TOP_STATEMENTS = 5


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    # utime and stime: fields 14 and 15 of the line, counted from the pid.
    return (int(fields[11]) + int(fields[12])) / _TICK


@dataclass(frozen=True)
class Statement:
    """What pg_stat_statements counted of one statement (exec time in ms, as it does)."""

    query: str
    calls: int
    exec_ms: float
    buffers: int  # shared blocks hit + read
    wal_records: int


Snapshot = dict[str, Statement]

# Plans are not timed (pg_stat_statements.track_planning is off by default):
# exec time is the executor's, and a utility statement's (BEGIN, COMMIT) whole run.
STATEMENTS_SQL = """
SELECT queryid::text, query, calls, total_exec_time, shared_blks_hit + shared_blks_read,
       wal_records
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query NOT LIKE '%pg_stat_statements%'
"""


def snapshot(monitor: Any) -> Snapshot:
    """pg_stat_statements now, read on ``monitor`` (a connection of its own)."""
    rows = monitor.execute(STATEMENTS_SQL).fetchall()
    return {row[0]: Statement(row[1], row[2], row[3], row[4], row[5]) for row in rows}


def difference(before: Snapshot, after: Snapshot) -> Snapshot:
    """The statements run between two snapshots, and what they cost in between."""
    ran = {}
    for key, now in after.items():
        then = before.get(key)
        calls = now.calls - (then.calls if then else 0)
        if calls <= 0:
            continue
        ran[key] = Statement(
            now.query,
            calls,
            now.exec_ms - (then.exec_ms if then else 0.0),
            now.buffers - (then.buffers if then else 0),
            now.wal_records - (then.wal_records if then else 0),
        )
    return ran


def add(total: Snapshot, more: Snapshot) -> None:
    for key, statement in more.items():
        seen = total.get(key)
        total[key] = (
            statement
            if seen is None
            else Statement(
                seen.query,
                seen.calls + statement.calls,
                seen.exec_ms + statement.exec_ms,
                seen.buffers + statement.buffers,
                seen.wal_records + statement.wal_records,
            )
        )


@dataclass
class Round:
    cycles: int
    wall: float  # seconds, all cycles
    client_cpu: float
    backend_cpu: float | None = None
    server_cpu: float | None = None
    statements: Snapshot = field(default_factory=dict)


@dataclass
class Contender:
    """A cycle measured in rounds, and how to read its server's CPU."""

    name: str
    cycle: Cycle
    backend_pid: int | None = None  # the server process of its connection (PostgreSQL)
    server_cpu: Callable[[], float] | None = None  # the whole server's
    monitor: Any = None  # a connection that reads pg_stat_statements
    around: Callable[[bool], None] | None = None  # called with True before its rounds, False after
    rounds: list[Round] = field(default_factory=list)
    done: int = 0  # cycles run, so that its next round takes the next names

    def warm(self, cycles: int) -> None:
        """``cycles`` cycles, not measured."""
        with self._around():
            for n in range(self.done, self.done + cycles):
                self.cycle(n)
        self.done += cycles

    def run(self, cycles: int) -> None:
        """One round of ``cycles`` cycles, measured."""
        with self._around():
            before = snapshot(self.monitor) if self.monitor is not None else {}
            backend = self._backend_cpu()
            server = self.server_cpu() if self.server_cpu else None
            cpu, wall = time.process_time(), time.perf_counter()
            for n in range(self.done, self.done + cycles):
                self.cycle(n)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            after_server = self.server_cpu() if self.server_cpu else None
            after_backend = self._backend_cpu()
            statements = difference(before, snapshot(self.monitor)) if self.monitor else {}
        self.done += cycles
        self.rounds.append(
            Round(
                cycles,
                wall,
                cpu,
                None if backend is None or after_backend is None else after_backend - backend,
                None if server is None or after_server is None else after_server - server,
                statements,
            )
        )

    def _backend_cpu(self) -> float | None:
        return process_cpu(self.backend_pid) if self.backend_pid else None

    @contextmanager
    def _around(self) -> Iterator[None]:
        if self.around is not None:
            self.around(True)
        try:
            yield
        finally:
            if self.around is not None:
                self.around(False)


def interleave(contenders: list[Contender], rounds: int, cycles: int) -> None:
    for _ in range(rounds):
        for contender in contenders:
            contender.run(cycles)


# -- summaries ----------------------------------------------------------------------


def _median_ms(rounds: list[Round]) -> float:
    return statistics.median(r.wall * 1000 / r.cycles for r in rounds)


def _total_ms(rounds: list[Round], key: str) -> float | None:
    """All rounds' ``key`` (CPU seconds) over all their cycles, in ms; None
    when a round could not read it."""
    values: list[float | None] = [getattr(r, key) for r in rounds]
    known = [value for value in values if value is not None]
    if not rounds or len(known) < len(rounds):
        return None
    return sum(known) * 1000 / sum(r.cycles for r in rounds)


def top_statements(rounds: list[Round], top: int = TOP_STATEMENTS) -> dict[str, Any]:
    """Every round's statements together: exec time per cycle, and the ``top``
    statements by their share of it, each with its mean per call."""
    total: Snapshot = {}
    for r in rounds:
        add(total, r.statements)
    cycles = sum(r.cycles for r in rounds)
    if not total or not cycles:
        return {"exec_us_per_cycle": None, "statements_per_cycle": None, "top": []}
    ranked = sorted(total.values(), key=lambda s: s.exec_ms, reverse=True)
    return {
        "exec_us_per_cycle": round(sum(s.exec_ms for s in ranked) * 1000 / cycles, 2),
        "statements_per_cycle": round(sum(s.calls for s in ranked) / cycles, 2),
        "top": [
            {
                "query": " ".join(s.query.split())[:160],
                "calls_per_cycle": round(s.calls / cycles, 2),
                "mean_exec_us": round(s.exec_ms * 1000 / s.calls, 2),
                "buffers_per_call": round(s.buffers / s.calls, 2),
                "wal_records_per_call": round(s.wal_records / s.calls, 2),
            }
            for s in ranked[:top]
        ],
    }


def summary(contender: Contender) -> dict[str, Any]:
    rounds = contender.rounds
    wall = _median_ms(rounds)
    figures: dict[str, Any] = {
        "name": contender.name,
        "rounds": len(rounds),
        "cycles_per_round": rounds[0].cycles if rounds else 0,
        "cycles_per_s": round(1000 / wall, 1),
        "rounds_cycles_per_s": [round(r.cycles / r.wall, 1) for r in rounds],
        "wall_ms": round(wall, 4),
    }
    for key, name in (
        ("client_cpu", "client_cpu_ms"),
        ("backend_cpu", "backend_cpu_ms"),
        ("server_cpu", "server_cpu_ms"),
    ):
        value = _total_ms(rounds, key)
        figures[name] = None if value is None else round(value, 4)
    if contender.monitor is not None:
        figures.update(top_statements(rounds))
    return figures


def _ratio(value: float | None, floor: float | None) -> float | None:
    if value is None or not floor:
        return None
    return round(value / floor, 3)


# A cost per cycle, and the name of its multiple of the floor's.
MULTIPLES = {
    "client_cpu_ms": "client_cpu_x_floor",
    "backend_cpu_ms": "backend_cpu_x_floor",
    "server_cpu_ms": "server_cpu_x_floor",
    "exec_us_per_cycle": "exec_x_floor",
}


def beside_floor(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (the floor's first) with each one's multiples of the floor's figures:
    ``x_floor`` its speed (cycles/s), the others its costs per cycle."""
    floor = rows[0]
    for row in rows:
        row["x_floor"] = _ratio(row["cycles_per_s"], floor["cycles_per_s"])
        paired = [
            mine / theirs
            for mine, theirs in zip(
                row["rounds_cycles_per_s"], floor["rounds_cycles_per_s"], strict=True
            )
            if theirs
        ]
        row["x_floor_paired"] = round(statistics.median(paired), 3) if paired else None
        row["x_floor_rounds"] = [round(min(paired), 3), round(max(paired), 3)] if paired else None
        for key, multiple in MULTIPLES.items():
            if key in row:
                row[multiple] = _ratio(row[key], floor.get(key))
    return rows


# -- issue 45's goals ------------------------------------------------------------------------


def _row(rows: list[dict[str, Any]] | None, name: str) -> dict[str, Any] | None:
    return next((row for row in rows or [] if row["name"] == name), None)


def goals(results: dict[str, Any], judged: str, metrics: str) -> list[dict[str, Any]]:
    """Each goal of issue 45, the figure it is judged on (of the contender
    ``judged``; the client CPU with the Prometheus receivers, of ``metrics``)
    and whether it is met; a goal whose figure was not measured is left out."""
    durable, fast = results.get("durable"), results.get("fast")
    wanted: list[tuple[str, dict[str, Any] | None, str, float, bool]] = [
        # (goal, row, key, bound, at least)
        (
            "durable PostgreSQL, one client: cycles/s x floor",
            _row(durable, judged),
            "x_floor",
            0.7,
            True,
        ),
        (
            "server CPU per cycle (backend) x floor",
            _row(durable, judged),
            "backend_cpu_x_floor",
            1.5,
            False,
        ),
        (
            "server execution per cycle (pg_stat_statements) x floor",
            _row(durable, judged),
            "exec_x_floor",
            1.5,
            False,
        ),
        ("fast commits, one client: cycles/s x floor", _row(fast, judged), "x_floor", 0.6, True),
        ("client CPU per cycle x floor", _row(durable, judged), "client_cpu_x_floor", 2.0, False),
        (
            "client CPU per cycle x floor, Prometheus receivers",
            _row(durable, metrics),
            "client_cpu_x_floor",
            2.3,
            False,
        ),
    ]
    for count, rows in sorted(
        (results.get("clients") or {}).items(), key=lambda item: int(item[0])
    ):
        wanted.append(
            (
                f"{count} client processes: cycles/s x floor",
                _row(rows, judged),
                "x_floor",
                0.5,
                True,
            )
        )
    wanted.append(
        (
            "SQLite, one client: cycles/s x its floor",
            _row(results.get("sqlite"), judged),
            "x_floor",
            0.6,
            True,
        )
    )
    wanted.append(
        (
            "MariaDB, one client: cycles/s x its floor",
            _row(results.get("mariadb"), judged),
            "x_floor",
            0.5,
            True,
        )
    )
    judged_goals = []
    for goal, row, key, bound, at_least in wanted:
        figure = None if row is None else row.get(key)
        if figure is None:
            continue
        met = figure >= bound if at_least else figure <= bound
        target = f"{'>=' if at_least else '<='} {bound}"
        judged_goals.append({"goal": goal, "figure": figure, "target": target, "met": met})
    return judged_goals
