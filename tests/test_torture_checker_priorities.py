"""The torture run's checker on synthetic histories of waiters with
priorities (invariant 17): when a waiter is granted, none with a smaller key
(the database's time of queuing less its priority in minutes) that queued
before the lock came free may still wait. Each case passes a clean history
and rejects a broken one."""

from __future__ import annotations

import pytest

from tools.torture.check_priorities import grants
from tools.torture.checker import check
from tools.torture.sections import read
from tools.torture.synthetic import Events, fault, holder, invariants, waiter

pytestmark = pytest.mark.vendor_independent


def first(leave: float | None = 2, ttl: float = 10) -> Events:
    """The first holder (token 1, granted at 1), released at ``leave`` (None: never)."""
    return waiter("a", 1, None, 1, leave, ttl=ttl)


def test_first_come_first_served_within_a_priority() -> None:
    b, c = waiter("b", 2, 1.1, 2.01, 2.1), waiter("c", 3, 1.2, 2.11, 2.2)
    assert check(first() + b + c) == []
    compared = [(len(g.ahead), len(g.passed)) for g in grants(read(first() + b + c))]
    assert compared == [(1, 0), (0, 0)]  # b's grant, with c waiting behind; c's
    b, c = waiter("b", 3, 1.1, 2.11, 2.2), waiter("c", 2, 1.2, 2.01, 2.1)
    violations = check(first() + b + c)
    assert [v.invariant for v in violations] == [17]
    assert (
        "c.2 (priority 0, queued) granted token 2 while b.3 (priority 0)" in violations[0].message
    )


def test_a_higher_priority_goes_first() -> None:
    b = waiter("b", 3, 1.1, 2.11, 2.2)
    c = waiter("c", 2, 1.2, 2.01, 2.1, priority=5)
    assert check(first() + b + c) == []
    b, c = waiter("b", 2, 1.1, 2.01, 2.1), waiter("c", 3, 1.2, 2.11, 2.2, priority=5)
    violations = check(first() + b + c)
    assert [v.invariant for v in violations] == [17]
    assert "by 299.899 s" in violations[0].message


def test_a_waiter_older_by_more_than_the_priorities_spread_goes_first() -> None:
    b = waiter("b", 2, 1.1, 302, 302.1)  # queued 5 min 0.1 s before c's priority 5
    c = waiter("c", 3, 301.2, 302.2, 302.3, priority=5)
    assert check(first(leave=301.5, ttl=400) + b + c) == []


def test_a_waiter_queued_after_the_lock_came_free_is_not_counted() -> None:
    b = waiter("b", 2, 1.1, 2.06, 2.1)
    c = waiter("c", 3, 2.05, 2.11, 2.2, priority=5)  # queued after a's release began
    assert check(first() + b + c) == []
    assert [len(g.ahead) for g in grants(read(first() + b + c))] == [0, 0]


def test_the_lock_comes_free_at_the_expiry_of_a_holder_that_did_not_release() -> None:
    expiring = first(leave=None, ttl=1)  # expires at 2
    expiring.append({"p": "runner", "op": "killed", "target": "a", "t": 1.5})
    b = waiter("b", 2, 1.1, 2.01, 2.1)
    before = waiter("c", 3, 1.9, 2.11, 2.2, priority=5)
    assert invariants(expiring + b + before) == [17]
    after = waiter("c", 3, 2.005, 2.11, 2.2, priority=5)  # its ticket's time after the expiry
    assert check(expiring + b + after) == []


def test_a_waiter_that_timed_out_after_the_grant_was_passed() -> None:
    b = waiter("b", 2, 1.1, 2.01, 2.1)
    timed_out = waiter("c", None, 1.2, 2.5, priority=5, timeout=1.3, t0=1.19)  # deadline 2.49
    assert invariants(first() + b + timed_out) == [17]
    gone = waiter("c", None, 1.2, 2.0, priority=5, timeout=0.8, t0=1.19)  # deadline 1.99
    assert check(first() + b + gone) == []


def test_a_grant_after_an_unrecorded_one_is_not_judged() -> None:
    b, c = waiter("b", 3, 1.1, 2.01, 2.1), waiter("c", 4, 1.2, 2.11, 2.2, priority=5)
    assert check(first() + b + c) == []  # token 2 went to nobody recorded
    assert [g.grant.token for g in grants(read(first() + b + c))] == [4]


def test_a_fault_over_the_pair_leaves_it_unjudged() -> None:
    b, c = waiter("b", 2, 1.1, 2.01, 2.1), waiter("c", 3, 1.2, 2.11, 2.2, priority=5)
    restart = fault(t0=1.5, t1=1.6, raise_window=[1.5, 1.6])
    assert check([*first(), *b, *c, restart]) == []
    assert invariants([*first(), *b, *c, fault(t0=9, t1=10)]) == [17]


def test_a_fault_of_one_process_leaves_only_its_pairs_unjudged() -> None:
    b, c = waiter("b", 2, 1.1, 2.01, 2.1), waiter("c", 3, 1.2, 2.11, 2.2, priority=5)
    terminated = {"kind": "terminate worker backend", "t0": 1.5, "t1": 1.6}
    assert check([*first(), *b, *c, fault(**terminated, scope="c")]) == []
    assert invariants([*first(), *b, *c, fault(**terminated, scope="x")]) == [17]
    read_only = fault(kind="read-only", t0=0.5, t1=0.6)  # only while it lasts
    assert invariants([*first(), *b, *c, read_only]) == [17]


def test_a_waiter_that_never_queued_passes_none() -> None:
    b = waiter("b", 2, None, 2.01, 2.1)  # found nobody queued: took it at once
    c = waiter("c", 3, 1.2, 2.11, 2.2, priority=-5)
    violations = check(first() + b + c)
    assert [v.invariant for v in violations] == [17]
    assert "never queued" in violations[0].message


def test_a_waiter_that_queued_again_is_judged_from_its_last_ticket() -> None:
    b = waiter("b", 2, 1.1, 2.01, 2.1)
    c = waiter("c", 3, 1.2, 2.11, 2.2, priority=5)
    again = dict(c[0], t=2.03, db0="2026-01-01T00:00:02.029000+00:00")
    again["db1"] = "2026-01-01T00:00:02.030000+00:00"
    assert check(first() + b + [again] + c) == []


def test_keys_closer_than_the_margin_are_not_told_apart() -> None:
    b = waiter("b", 3, 1.1, 2.11, 2.2)
    c = waiter("c", 2, 1.1015, 2.01, 2.1)  # queued 1.5 ms after b
    assert check(first() + b + c) == []


def test_a_ticket_whose_time_was_not_read_is_not_judged() -> None:
    b, c = waiter("b", 2, 1.1, 2.01, 2.1), waiter("c", 3, 1.2, 2.11, 2.2, priority=5)
    del c[0]["db1"]
    assert check(first() + b + c) == []


def test_other_holders_of_the_resource_end_the_previous_grant_too() -> None:
    plain = holder("a", 1, 1, 2)  # the manager's acquire and release, at 2
    b, c = waiter("b", 2, 1.1, 2.01, 2.1), waiter("c", 3, 1.2, 2.11, 2.2, priority=5)
    assert invariants(plain + b + c) == [17]
