"""The arithmetic of ``benchmarks.floor`` (issue 45): pg_stat_statements
between two snapshots, medians per cycle and their multiples of the floor's,
the goals judged; and the floor's own SQL, on a SQLite file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from benchmarks import floor_sql
from benchmarks.floor_measure import (
    Contender,
    Round,
    Statement,
    add,
    beside_floor,
    difference,
    goals,
    summary,
    top_statements,
)
from benchmarks.floor_report import busy, clients_row

pytestmark = pytest.mark.vendor_independent


def test_difference_keeps_what_ran_between_two_snapshots() -> None:
    before = {"1": Statement("INSERT", 10, 1.0, 100, 40), "2": Statement("DELETE", 5, 0.5, 20, 5)}
    after = {
        "1": Statement("INSERT", 30, 3.0, 300, 120),
        "2": Statement("DELETE", 5, 0.5, 20, 5),  # did not run
        "3": Statement("COMMIT", 4, 0.2, 0, 0),  # new
    }
    assert difference(before, after) == {
        "1": Statement("INSERT", 20, 2.0, 200, 80),
        "3": Statement("COMMIT", 4, 0.2, 0, 0),
    }
    total = {"1": Statement("INSERT", 1, 0.5, 10, 4)}
    add(total, difference(before, after))
    assert total["1"] == Statement("INSERT", 21, 2.5, 210, 84)
    assert total["3"].calls == 4


def test_top_statements_are_per_cycle_and_per_call() -> None:
    rounds = [
        Round(100, 1.0, 0.1, statements={"a": Statement("UPSERT  \n x", 100, 2.0, 1000, 400)}),
        Round(
            100,
            1.0,
            0.1,
            statements={
                "a": Statement("UPSERT  \n x", 100, 2.0, 1000, 400),
                "b": Statement("DELETE", 200, 1.0, 800, 200),
            },
        ),
    ]
    figures = top_statements(rounds, top=1)
    # 5 ms of execution over 200 cycles; 400 statements.
    assert (figures["exec_us_per_cycle"], figures["statements_per_cycle"]) == (25.0, 2.0)
    assert figures["top"] == [
        {
            "query": "UPSERT x",
            "calls_per_cycle": 1.0,
            "mean_exec_us": 20.0,
            "buffers_per_call": 10.0,
            "wal_records_per_call": 4.0,
        }
    ]
    assert top_statements([Round(10, 1.0, 0.1)])["exec_us_per_cycle"] is None


def _contender(name: str, rounds: list[tuple[float, float, float | None]]) -> Contender:
    """Rounds of 1,000 cycles: (wall, client CPU, backend CPU) in seconds."""
    contender = Contender(name, lambda n: None)
    contender.rounds = [Round(1000, wall, cpu, backend) for wall, cpu, backend in rounds]
    return contender


def test_medians_per_cycle_and_multiples_of_the_floor() -> None:
    floor = summary(_contender("floor", [(0.5, 0.1, 0.2), (0.4, 0.1, 0.1), (0.6, 0.1, 0.3)]))
    lock = summary(_contender("lock", [(1.0, 0.3, 0.3), (0.8, 0.2, 0.2), (2.0, 0.4, 0.4)]))
    assert (floor["wall_ms"], floor["cycles_per_s"]) == (0.5, 2000.0)
    assert floor["rounds_cycles_per_s"] == [2000.0, 2500.0, 1666.7]
    rows = beside_floor([floor, lock])
    assert rows[0]["x_floor"] == 1.0
    assert lock["x_floor"] == 0.5  # 1,000 cycles/s against 2,000
    # Round by round: 1000/2000, 1250/2500, 500/1666.7.
    assert (lock["x_floor_paired"], lock["x_floor_rounds"]) == (0.5, [0.3, 0.5])
    # CPU: all rounds' over all their cycles (0.9 s over 3,000 cycles, against 0.3 s and 0.6 s).
    assert (lock["client_cpu_ms"], lock["backend_cpu_ms"]) == (0.3, 0.3)
    assert (lock["client_cpu_x_floor"], lock["backend_cpu_x_floor"]) == (3.0, 1.5)
    assert lock["server_cpu_ms"] is None and lock["server_cpu_x_floor"] is None


def test_a_cost_missing_in_any_round_is_not_reported() -> None:
    figures = summary(_contender("mariadb", [(1.0, 0.3, None), (1.0, 0.3, 0.2)]))
    assert figures["backend_cpu_ms"] is None


def test_clients_rows_are_the_medians_of_the_runs() -> None:
    runs = [
        {"cycles_per_s": 1000.0, "server_cpu_ms": 0.2, "client_cpu_ms": 0.1},
        {"cycles_per_s": 3000.0, "server_cpu_ms": 0.4, "client_cpu_ms": 0.3},
        {"cycles_per_s": 2000.0, "server_cpu_ms": 0.3, "client_cpu_ms": 0.2},
    ]
    row = clients_row("floor", runs)
    assert (row["cycles_per_s"], row["server_cpu_ms"], row["client_cpu_ms"]) == (2000.0, 0.3, 0.2)
    assert row["rounds_cycles_per_s"] == [1000.0, 3000.0, 2000.0]


def _row(name: str, **figures: Any) -> dict[str, Any]:
    return {"name": name, **figures}


def test_goals_judge_the_manager_against_each_bound() -> None:
    manager, metrics = "acquire + release", "acquire + release, Prometheus receivers"
    results = {
        "durable": [
            _row("floor"),
            _row(
                manager,
                x_floor=0.7,  # just met
                backend_cpu_x_floor=1.6,  # missed
                exec_x_floor=1.5,
                client_cpu_x_floor=2.1,
            ),
            _row(metrics, client_cpu_x_floor=2.3),
        ],
        "fast": [_row(manager, x_floor=0.59)],
        "clients": {"64": [_row(manager, x_floor=0.5)], "8": [_row(manager, x_floor=0.4)]},
        "sqlite": [_row(manager, x_floor=0.61)],
    }
    judged = {
        goal["goal"]: (goal["figure"], goal["met"]) for goal in goals(results, manager, metrics)
    }
    assert judged == {
        "durable PostgreSQL, one client: cycles/s x floor": (0.7, True),
        "server CPU per cycle (backend) x floor": (1.6, False),
        "server execution per cycle (pg_stat_statements) x floor": (1.5, True),
        "fast commits, one client: cycles/s x floor": (0.59, False),
        "client CPU per cycle x floor": (2.1, False),
        "client CPU per cycle x floor, Prometheus receivers": (2.3, True),
        "8 client processes: cycles/s x floor": (0.4, False),
        "64 client processes: cycles/s x floor": (0.5, True),
        "SQLite, one client: cycles/s x its floor": (0.61, True),
        # MariaDB not measured: no goal.
    }
    assert [goal["goal"][:2] for goal in goals(results, manager, metrics)][6:8] == ["8 ", "64"]


def test_clients_share_the_names_in_turn() -> None:
    names = floor_sql.names("c", 10)
    shares = [floor_sql.share(names, index, 3) for index in range(3)]
    assert shares[0] == ["c:0", "c:3", "c:6", "c:9"]
    assert sorted(sum(shares, [])) == sorted(names)
    with pytest.raises(ValueError):
        floor_sql.share(names, 3, 3)


def test_the_floor_takes_a_free_or_expired_row_and_releases_its_own(tmp_path: Path) -> None:
    connection = floor_sql.sqlite_connection(str(tmp_path / "floor.sqlite3"))
    floor_sql.create_table("sqlite", connection)
    assert floor_sql.TABLE == "bench_floor"
    acquire, release = floor_sql.statements("sqlite")

    def take(resource: str, owner: str) -> Any:
        return connection.execute(acquire, (resource, owner)).fetchone()

    first = take("a", "one")
    assert first is not None
    assert take("a", "two") is None  # held by another owner
    assert take("a", "one") == first  # the owner again: the same row
    connection.execute(release, ("a", "two"))  # not its owner: nothing
    assert take("a", "two") is None
    connection.execute(
        "UPDATE bench_floor SET expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 seconds')"
    )
    assert take("a", "two") == first  # expired: taken, the same row
    tokens = connection.execute("SELECT fencing_token FROM bench_floor").fetchall()
    assert tokens == [(3,)]
    connection.execute(release, ("a", "two"))
    assert connection.execute("SELECT count(*) FROM bench_floor").fetchone() == (0,)
    # A cycle over the names in turn, as the benchmark runs it.
    cycle = floor_sql.raw_cycle("sqlite", connection, floor_sql.names("job", 3), "bench")
    for n in range(7):
        cycle(n)
    assert isinstance(connection, sqlite3.Connection)


def test_a_round_reads_the_costs_around_the_cycles() -> None:
    ran: list[int] = []
    server = iter([1.0, 1.25])
    switched: list[bool] = []
    contender = Contender("x", ran.append, server_cpu=lambda: next(server), around=switched.append)
    contender.warm(3)
    assert (ran, contender.rounds, switched) == ([0, 1, 2], [], [True, False])
    contender.run(2)
    assert ran[3:] == [3, 4]  # the next names
    (measured,) = contender.rounds
    assert (measured.cycles, measured.server_cpu, measured.backend_cpu) == (2, 0.25, None)


def test_a_run_is_busy_when_the_load_passed_the_cores() -> None:
    assert not busy({"nproc": 2, "load_average": [1.9, 5.0, 5.0], "load_average_end": [2.0, 0, 0]})
    assert busy({"nproc": 2, "load_average": [0.5, 0, 0], "load_average_end": [2.1, 0, 0]})
    assert busy({"nproc": 2, "load_average": [2.5, 0, 0]})  # no end: a run that failed
