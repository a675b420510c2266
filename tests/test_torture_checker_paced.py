"""The torture run's checker on synthetic histories of paced calls: a
throttle's decisions (invariants 13 and 14), ``once_per`` and ``min_hold``
windows (15), and both during a fault (4). Each invariant passes a clean
history and rejects a broken one."""

from __future__ import annotations

import pytest

from tools.torture.checker import check
from tools.torture.synthetic import fault, invariants, use, uses, window_run

pytestmark = pytest.mark.vendor_independent

# -- 13: at most N grants in any period -----------------------------------------------


def test_grants_a_period_apart_pass() -> None:
    # 3/2s: the fourth grant comes exactly a period after the first (it has left).
    assert check(uses([0, 0.5, 1.0, 2.0, 2.5, 3.0])) == []


def test_n_plus_one_grants_within_a_period_are_rejected() -> None:
    violations = check(uses([0, 0.5, 1.0, 1.9]))
    assert [v.invariant for v in violations] == [13]
    assert "4 uses granted within 0:00:01.900000" in violations[0].message
    assert len(violations[0].events) == 4


def test_each_key_is_counted_on_its_own() -> None:
    events = uses([0, 0.5, 1.0]) + [
        use("q", t, True, key="other", remaining=2 - n) for n, t in enumerate((0.2, 0.6, 1.1))
    ]
    assert check(events) == []


# -- 14: decisions agree with the grants ------------------------------------------------


def test_a_refusal_with_n_grants_in_the_period_passes() -> None:
    refusal = use("r", 1.5, False, retry_after=0.5)  # the grant of 0 leaves at 2
    assert check([*uses([0, 0.5, 1.0]), refusal]) == []


def test_a_refusal_with_room_in_the_window_is_rejected() -> None:
    refusal = use("r", 2.2, False, retry_after=0.3)  # the grant of 0 has left
    violations = check([*uses([0, 0.5, 1.0]), refusal])
    assert [v.invariant for v in violations] == [14]
    assert "refused at" in violations[0].message and "2 grant(s)" in violations[0].message


def test_a_refusal_explained_by_a_use_of_unknown_outcome_passes() -> None:
    raised = {"p": "x", "op": "throttle", "key": "k", "rate": "3/2s", "t0": 0.9, "t1": 1.1}
    raised |= {"error": {"class": "OperationalError", "message": "gone", "db": True}}
    refusal = use("r", 1.5, False, retry_after=0.1)  # not exact: the unknown one may be older
    assert check([*uses([0, 0.5]), raised, refusal]) == []


def test_a_refusal_whose_retry_after_misses_the_oldest_grant_is_rejected() -> None:
    refusal = use("r", 1.5, False, retry_after=1.0)
    violations = check([*uses([0, 0.5, 1.0]), refusal])
    assert [v.invariant for v in violations] == [14]
    assert "leaves the window" in violations[0].message


def test_a_grant_that_miscounts_its_window_is_rejected() -> None:
    events = [use("a", 0, True, remaining=2), use("b", 0.5, True, remaining=2)]
    violations = check(events)
    assert [v.invariant for v in violations] == [14]
    assert "remaining 2" in violations[0].message


def test_grants_at_the_same_database_time_may_be_in_either_order() -> None:
    events = [use("a", 0, True, remaining=2), use("b", 0, True, remaining=1)]
    assert check(events) == []


# -- 15: once_per and min_hold windows ------------------------------------------------


def test_once_per_grants_every_apart_pass() -> None:
    events = [window_run("a", 0), window_run("b", None), window_run("c", 1.0)]
    assert check([*events, window_run("d", 2.5)]) == []


def test_two_once_per_grants_within_every_are_rejected() -> None:
    violations = check([window_run("a", 0), window_run("b", 0.9)])
    assert [v.invariant for v in violations] == [15]
    assert "0.900000 s after" in violations[0].message


def test_a_min_hold_taken_before_its_end_is_rejected() -> None:
    kept = window_run("a", 0, kind="min_hold", ttl=0.5, resource="h")
    assert invariants([kept, window_run("b", 0.6, kind="min_hold", resource="h")]) == [15]


def test_a_min_hold_whose_exit_raised_is_held_for_its_ttl_only() -> None:
    error = {"class": "OperationalError", "message": "gone", "db": True}
    raised = window_run("a", 0, kind="min_hold", ttl=0.5, resource="h", error=error)
    assert check([raised, window_run("b", 0.6, kind="min_hold", resource="h")]) == []


# -- 4: during a fault ------------------------------------------------------------------


def test_a_throttle_grant_during_a_fault_is_rejected() -> None:
    read_only = fault(kind="read-only", raise_window=[10, 20])
    violations = check([read_only, use("a", 12, True, remaining=2)])
    assert [v.invariant for v in violations] == [4]
    assert "throttle" in violations[0].message and "granted=True" in violations[0].message


def test_a_throttle_refusal_during_a_fault_is_rejected() -> None:
    # A use locks its key's row first: a database that cannot write refuses that.
    read_only = fault(kind="read-only", raise_window=[10, 20])
    refusal = use("r", 12.5, False, retry_after=0.5)
    grants = uses([9, 9.5, 9.8], limit=3, period=4)
    assert invariants([*grants, refusal | {"period": 4_000_000}]) == []
    assert invariants([read_only, *grants, refusal | {"period": 4_000_000}]) == [4]


def test_a_once_per_not_due_during_a_fault_is_rejected() -> None:
    read_only = fault(kind="read-only", raise_window=[10, 20])
    not_due = window_run("a", None) | {"t0": 12, "t1": 12.01}
    violations = check([read_only, not_due])
    assert [v.invariant for v in violations] == [4]
    assert "not due" in violations[0].message
