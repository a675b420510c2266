"""The arithmetic of ``benchmarks.features``: admissions per window, ratios to
each cycle's reference, a failed part recorded and the run going on."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.features import Run
from benchmarks.features_crowds import most_in_a_window
from benchmarks.features_report import REFERENCES, redis_ratios, reference_ratios

pytestmark = pytest.mark.vendor_independent


def test_most_in_a_window_counts_uses_within_one_period() -> None:
    assert most_in_a_window([], 1.0) == 0
    assert most_in_a_window([0.0, 0.5, 0.99, 1.0, 1.5], 1.0) == 3  # [0, 1) and [0.5, 1.5)
    # A fixed window's burst around its turn: 2 + 2 within 0.2 s.
    assert most_in_a_window([0.9, 0.95, 1.0, 1.05], 1.0) == 4


def _row(database: str, name: str, rounds: list[float]) -> dict[str, Any]:
    return {"database": database, "name": name, "rounds": rounds}


def test_a_cycle_is_compared_with_its_reference_round_by_round() -> None:
    cycles = [
        _row("postgresql", "lock()", [100.0, 200.0, 300.0]),
        _row("postgresql", "lock(lock_delay=5)", [90.0, 100.0, 290.0]),
        _row("sqlite", "lock(lock_delay=5)", [10.0, 10.0, 10.0]),  # no reference measured
    ]
    ratios = reference_ratios(cycles)
    assert ratios == {("postgresql", "lock(lock_delay=5)"): ("lock()", 0.9)}
    assert REFERENCES["lock(lock_delay=5)"] == "lock()"


def test_the_throttle_is_compared_with_redis_in_the_same_scenario() -> None:
    scenario = "one key, 100/s (mostly refused)"
    cycles = [
        _row("postgresql", f"throttle, {scenario}", [100.0, 100.0]),
        _row("redis", f"Redis sliding window, {scenario}", [1000.0, 2000.0]),
    ]
    assert redis_ratios(cycles) == {("postgresql", scenario): pytest.approx(0.075)}


def test_a_part_that_fails_is_listed_and_the_others_are_kept() -> None:
    results: dict[str, Any] = {}
    run = Run(results)

    def measure(alias: str) -> dict[str, str]:
        if alias == "mariadb":
            raise ConnectionError("gone")
        return {"alias": alias}

    run.each("lock_delay", ["postgresql", "mariadb", "sqlite"], measure)
    assert results["lock_delay"] == {
        "postgresql": {"alias": "postgresql"},
        "sqlite": {"alias": "sqlite"},
    }
    assert results["errors"] == [
        {"section": "lock_delay", "where": "mariadb", "error": "ConnectionError('gone')"}
    ]
