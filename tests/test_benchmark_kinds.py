"""The arithmetic of ``benchmarks.kinds``: overlaps, percentiles, goals judged,
figures merged into the benchmark JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kinds import save
from benchmarks.kinds_crowds import Turns, most_at_once, overtakers, percentile
from benchmarks.kinds_report import goals, paired

pytestmark = pytest.mark.vendor_independent


def test_most_at_once_counts_overlapping_holds() -> None:
    assert most_at_once([]) == 0
    assert most_at_once([(0.0, 1.0), (2.0, 3.0)]) == 1
    assert most_at_once([(0.0, 2.0), (1.0, 3.0), (1.5, 1.8), (2.5, 4.0)]) == 3


def test_percentile_picks_the_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 51.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert math.isnan(percentile([], 0.99))


def _cycle(
    database: str, name: str, rate: float, acquire_ms: float | None = None
) -> dict[str, Any]:
    # Two rounds whose ratios have the same median as the rates'.
    return {
        "database": database,
        "name": name,
        "cycles_per_s": rate,
        "rounds": [rate, rate],
        "acquire_p50_ms": acquire_ms,
        "acquire_rounds_ms": [acquire_ms, acquire_ms],
    }


def _cycles(database: str) -> list[dict[str, Any]]:
    names = ["floor", "exclusive", "shared", "permit", "acquire_all of 3", "3 single acquires"]
    return [_cycle(database, name, 100.0, acquire_ms=1.0) for name in names]


def test_goals_judge_each_figure_against_its_bound() -> None:
    cycles = [
        _cycle("mariadb", "floor", 1000),
        _cycle("mariadb", "exclusive", 500),  # 0.5x: just met
        _cycle("mariadb", "shared", 390),  # 0.78x: missed
        _cycle("mariadb", "permit", 400),  # 0.8x: met
        _cycle("mariadb", "acquire_all of 3", 100, acquire_ms=2.0),
        _cycle("mariadb", "3 single acquires", 100, acquire_ms=0.9),  # 0.45x: missed
    ]
    results = {
        "databases": ["mariadb"],
        "cycles": cycles,
        "operations": {"mariadb": {"reentrant re-entry": {"round_trips": 5.0}}},
        "leader": {"mariadb": {"ttl_s": 3.0, "kill_max_s": 4.2, "resign_p50_ms": 12.0}},
    }
    judged = {goal["figure"]: goal for goal in goals(results)}
    assert judged["exclusive cycle x raw floor"]["met"] is True
    assert judged["exclusive cycle x raw floor"]["goal"] == "≥ 0.5x"
    assert judged["shared cycle x exclusive"]["met"] is False
    assert judged["permit cycle x exclusive"]["met"] is True
    assert judged["acquire_all of 3 x 3 single acquires (speed)"]["value"] == 0.45
    assert judged["acquire_all of 3 x 3 single acquires (speed)"]["met"] is False
    assert judged["reentrant re-entry, round trips"]["met"] is False
    assert judged["leader killed: next term after (max), s"]["met"] is False  # > ttl + 1 s
    assert judged["leader resigned: next term after (p50), ms"]["met"] is True


def test_save_keeps_the_other_parts_of_the_benchmark_json(tmp_path: Path) -> None:
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps({"uncontended": [1, 2], "kinds": {"old": True}}))
    save({"new": True}, path, partial=False)
    assert json.loads(path.read_text()) == {"uncontended": [1, 2], "kinds": {"new": True}}
    fresh = tmp_path / "new" / "benchmark.json"
    save({"new": True}, fresh, partial=False)
    assert json.loads(fresh.read_text()) == {"kinds": {"new": True}}


def test_a_part_measured_again_replaces_only_that_part(tmp_path: Path) -> None:
    path = tmp_path / "benchmark.json"
    leader = {"ttl_s": 3.0, "kill_max_s": 2.5, "resign_p50_ms": 80.0}
    first = {
        "databases": ["postgresql", "mariadb"],
        "machine": {"load_average": [5.0, 5.0, 5.0]},
        "cycles": [*_cycles("postgresql"), *_cycles("mariadb")],
        "leader": {"postgresql": leader, "mariadb": leader},
    }
    save(first, path, partial=False)
    again = {
        "databases": ["mariadb"],
        "machine": {"load_average": [1.0, 1.0, 1.0]},
        "leader": {"mariadb": {**leader, "resign_p50_ms": 20.0}},
    }
    merged = save(again, path, partial=True)
    assert merged == json.loads(path.read_text())["kinds"]
    assert merged["cycles"] == first["cycles"]
    assert merged["leader"]["postgresql"] == leader
    assert merged["leader"]["mariadb"]["resign_p50_ms"] == 20.0
    assert merged["machine"] == first["machine"]
    assert merged["reruns"] == [
        {"sections": ["leader"], "databases": ["mariadb"], "machine": again["machine"]}
    ]
    judged = {(goal["database"], goal["figure"]): goal["met"] for goal in merged["goals"]}
    assert judged[("postgresql", "leader resigned: next term after (p50), ms")] is False
    assert judged[("mariadb", "leader resigned: next term after (p50), ms")] is True


def test_overtakers_are_readers_that_asked_after_the_writer_and_got_in_first() -> None:
    def turns(asks: list[float], waits: list[float]) -> Turns:
        return Turns(1.0, [len(asks)], asks, waits, [], [], 0.0, None, 0)

    writer = turns([10.0, 20.0], [5.0, 1.0])  # held at 15 and at 21
    readers = turns(
        [9.0, 11.0, 12.0, 16.0, 20.5],
        [3.0, 1.0, 4.0, 1.0, 0.1],  # got in at 12 (asked first), 12, 16, 17, 20.6
    )
    assert overtakers(writer, readers) == [1, 1]


def test_a_ratio_is_the_median_of_the_rounds_ratios() -> None:
    rows = {"a": {"rounds": [10.0, 100.0, 30.0]}, "b": {"rounds": [10.0, 200.0, 100.0]}}
    assert paired(rows, "a", "b") == 0.5  # the medians' ratio would be 30 / 100
