"""The torture run's checker on synthetic histories (``tools.torture.synthetic``):
clean ones pass, and each kind of broken one is rejected with the invariant it
breaks. Invariants 1-6 with exclusive holds; the lock kinds' are in
``test_torture_checker_kinds.py``."""

from __future__ import annotations

import pytest

from tools.torture.checker import check
from tools.torture.synthetic import (
    at,
    fault,
    force_release,
    holder,
    invariants,
    snapshot,
    store_final,
)

pytestmark = pytest.mark.vendor_independent


def test_a_clean_history_passes() -> None:
    events = holder("a", 1, 1, 2, writes=((1.1, True),)) + holder(
        "b", 2, 3, 4, writes=((3.1, True),)
    )
    assert check(events) == []


# -- 1: overlap ----------------------------------------------------------------------


def test_overlap_of_a_valid_lock_is_rejected() -> None:
    events = holder("a", 1, 1, 5, released="forbidden") + holder("b", 2, 3, 4)
    violations = check(events)
    assert [v.invariant for v in violations] == [1]
    assert "valid until" in violations[0].message


def test_overlap_after_expiry_with_a_told_holder_and_a_refused_write_is_allowed() -> None:
    # a's lock (ttl 2) expired at 3; b took it at 4; a, paused, woke at 6, was
    # told, and its write was refused.
    a = holder(
        "a", 1, 1, 7, ttl=2, writes=((1.1, True), (6, False)), told=True, released="forbidden"
    )
    b = holder("b", 2, 4, 8, writes=((4.1, True),))
    assert check(a + b) == []


def test_overlap_after_expiry_without_telling_the_holder_is_rejected() -> None:
    a = holder("a", 1, 1, 7, ttl=2, writes=((1.1, True), (6, False)), released="forbidden")
    b = holder("b", 2, 4, 8, writes=((4.1, True),))
    assert invariants(a + b) == [1]


def test_overlap_after_expiry_with_an_accepted_late_write_is_rejected() -> None:
    # b wrote at 4.1 with token 2; a's write at 6 (token 1) was still accepted.
    a = holder("a", 1, 1, 7, ttl=2, writes=((6, True),), told=True, released="forbidden")
    b = holder("b", 2, 4, 8, writes=((4.1, True),))
    assert "late write" in check(a + b)[0].message


def test_a_write_that_reached_the_store_before_the_next_holders_is_not_late() -> None:
    # a stalled mid-write past its expiry; its write landed after b entered but
    # before b's first write: the store had seen no larger token yet.
    a = holder("a", 1, 1, 7, ttl=2, writes=((2.9, True),), told=True, released="forbidden")
    a[2].update(t1=4.05)
    b = holder("b", 2, 4, 8, writes=((4.1, True),))
    assert check(a + b) == []


def test_overlap_after_a_force_release_is_allowed_when_fencing_held() -> None:
    a = holder("a", 1, 1, 7, writes=((1.1, True), (6, False)), told=True, released="not_found")
    force = force_release(2, 2.1)
    b = holder("b", 2, 3, 8, writes=((3.1, True),))
    assert check(a + [force] + b) == []


# -- 2: fencing tokens --------------------------------------------------------------------


def test_a_token_regression_is_rejected() -> None:
    events = holder("a", 5, 1, 2) + holder("b", 4, 3, 4)
    # (b's release then counts as a release by a non-holder too.)
    assert invariants(events) == [2, 3]


def test_a_token_issued_twice_is_rejected() -> None:
    # What an immediate restart with synchronous_commit=off can do: a confirmed
    # acquisition forgotten, its token given again to the next owner.
    events = holder("a", 7, 1, None, ttl=60) + holder("b", 7, 3, 4)
    assert 2 in invariants(events)


def test_a_reacquisition_keeps_its_token() -> None:
    first = holder("a", 3, 1, 2, ttl=60)
    again = [dict(e) for e in first[:1]]
    again[0].update(t0=2.5, t1=2.6)
    assert check(first + again) == []


# -- 3: owners ---------------------------------------------------------------------------


def test_a_release_by_a_non_owner_that_succeeded_is_rejected() -> None:
    events = holder("a", 1, 1, 5)
    events.append(
        {"p": "x", "op": "release", "resource": "r", "owner": "stranger", "t0": 2, "t1": 2.1}
        | {"result": "released"}
    )
    violations = check(events)
    # ... and the owner's own release afterwards cannot have released it again.
    assert [v.invariant for v in violations] == [3, 3]
    assert any("stranger, who never held it" in v.message for v in violations)


def test_a_renew_after_another_owner_acquired_is_rejected() -> None:
    events = holder("a", 1, 1, 2, ttl=1, told=True, released="not_found")
    events += holder("b", 2, 3, 6)
    lock = {"owner": "a.1", "token": 1, "acquired_at": at(1), "expires_at": at(14)}
    events.append(
        {"p": "a", "op": "renew", "resource": "r", "owner": "a.1", "t0": 4, "t1": 4.1, "lock": lock}
    )
    assert invariants(events) == [3]


def test_the_owners_own_renew_and_release_pass() -> None:
    events = holder("a", 1, 1, 5)
    lock = {"owner": "a.1", "token": 1, "acquired_at": at(1), "expires_at": at(13)}
    events.append(
        {"p": "a", "op": "renew", "resource": "r", "owner": "a.1", "t0": 3, "t1": 3.1, "lock": lock}
    )
    assert check(events) == []


# -- 4: faults raise -------------------------------------------------------------------


def test_a_fault_reported_as_not_acquired_is_rejected() -> None:
    events = [
        fault(raise_window=[11, 19]),
        {"p": "w", "op": "acquire", "resource": "r", "owner": "w.1", "t0": 12, "t1": 13}
        | {"lock": None},
    ]
    violations = check(events)
    assert [v.invariant for v in violations] == [4]
    assert "not acquired" in violations[0].message


def test_a_fault_reported_as_lock_not_acquired_is_rejected() -> None:
    error = {"class": "LockNotAcquired", "message": "held", "db": False}
    events = [
        fault(raise_window=[11, 19]),
        {"p": "w", "op": "lock", "resource": "r", "t0": 12, "t1": 13, "error": error},
    ]
    assert invariants(events) == [4]


def test_a_fault_that_raised_passes() -> None:
    error = {"class": "OperationalError", "message": "server closed the connection", "db": True}
    events = [
        fault(raise_window=[11, 19]),
        {"p": "w", "op": "acquire", "resource": "r", "owner": "w.1", "t0": 12, "t1": 13}
        | {"error": error},
        # Calls outside the window may succeed (before the stop, after the start).
        {"p": "w", "op": "acquire", "resource": "r", "owner": "w.1", "t0": 19.5, "t1": 21}
        | {"lock": None},
    ]
    assert check(events) == []


def test_a_call_on_a_hold_already_told_lost_is_not_judged() -> None:
    """A head stopped past its grant's lease resumed while the server restarted:
    its section was told the lock was lost, and its upgrade raised LockExpired
    without the database. Any other error class is still judged."""
    lost = {"class": "LockExpired", "message": "its ttl passed", "db": False}
    events = holder("w", 1, 12, None, ttl=1, kind="shared")
    events += [
        fault(raise_window=[13, 19]),
        {"p": "w", "op": "cs_told", "cs": "w:1", "t": 13.1, "how": "lost"},
        {"p": "w", "op": "upgrade", "resource": "r", "owner": "w.1", "t0": 13.2, "t1": 13.3}
        | {"error": lost},
    ]
    assert 4 not in invariants(events)
    events[-1] = events[-1] | {"error": {"class": "LockNotAcquired", "message": "", "db": False}}
    assert 4 in invariants(events)


def test_the_release_after_a_transaction_is_not_judged_a_call() -> None:
    """An until='commit' lock's release after its transaction is the library's,
    with no caller to raise to (it logs a failure): not judged by invariant 4."""
    events = [
        fault(raise_window=[11, 19]),
        {"p": "w", "op": "unlock", "resource": "r", "owner": "w.1", "t0": 12, "t1": 13}
        | {"result": "expired", "rolled_back": True},
    ]
    assert 4 not in invariants(events)


def test_a_waiter_whose_backend_was_terminated_must_raise() -> None:
    events = [
        fault(kind="terminate waiter backend", t0=5, t1=5.1, scope="w", raise_span=True),
        {"p": "w", "op": "lock", "resource": "r", "t0": 1, "t1": 9}
        | {"error": {"class": "LockNotAcquired", "message": "timed out", "db": False}},
    ]
    assert invariants(events) == [4]


def test_a_holder_whose_renewer_was_killed_must_be_told() -> None:
    events = holder("v", 1, 1, 8, ttl=1.5, writes=((1.1, True),))
    events.append(fault(kind="terminate renewer backend", t0=2, t1=2.1, scope="v", tell_span=True))
    assert invariants(events) == [4]
    events.append({"p": "v", "op": "cs_told", "cs": "v:1", "t": 3, "how": "lost"})
    assert check(events) == []


# -- 5: the counter ----------------------------------------------------------------------


def test_a_counter_that_matches_the_accepted_writes_passes() -> None:
    events = holder("a", 1, 1, 2, writes=((1.1, True),)) + holder(
        "b", 2, 3, 4, writes=((3.1, True),)
    )
    events.append(store_final(2, [(1, 1, "a:1#1", 1), (2, 2, "b:2#1", 2)]))
    assert check(events) == []


def test_a_lost_update_is_rejected() -> None:
    # Both writers read 0 and wrote 1: the counter says 1 after 2 accepted writes.
    events = holder("a", 1, 1, 2, writes=((1.1, True),)) + holder(
        "b", 2, 3, 4, writes=((3.1, True),)
    )
    events.append(store_final(1, [(1, 1, "a:1#1", 1), (2, 2, "b:2#1", 1)]))
    assert invariants(events) == [5]


def test_updates_lost_in_an_allowed_overlap_are_not_charged_to_a_later_writer() -> None:
    # a wrote 1 and 2; b, in an overlap a force-release allowed, had read 0 and
    # wrote 1, which undid both of a's updates; c, alone after them, read b's 1
    # and wrote 2: a value a wrote before, but no update of c's was lost (the
    # SQLite long run of 2026-12-01 reported this as a lost update of c's).
    a = holder(
        "a", 1, 1, 7, writes=((1.1, True), (1.2, True), (6, False)), told=True, released="not_found"
    )
    force = force_release(2, 2.1)
    b = holder("b", 2, 3, 8, writes=((3.1, True),))
    c = holder("c", 3, 9, 10, writes=((9.1, True),))
    log = [(1, 1, "a:1#1", 1), (2, 1, "a:1#2", 2), (3, 2, "b:2#1", 1), (4, 3, "c:3#1", 2)]
    assert check(a + [force] + b + c + [store_final(2, log)]) == []
    # Without the force-release, b's write is a lost update of a's, and c's is not.
    violations = check(a + b + c + [store_final(2, log)])
    assert 5 in [v.invariant for v in violations]
    assert "c:3#1" not in " ".join(v.message for v in violations)


def test_a_store_log_that_disagrees_with_the_writer_is_rejected() -> None:
    events = holder("a", 1, 1, 2, writes=((1.1, True),))
    events.append(store_final(0, []))
    assert invariants(events) == [5]


# -- 6: nothing lost ------------------------------------------------------------------


def test_a_valid_lock_missing_from_the_snapshot_is_rejected() -> None:
    events = holder("a", 1, 1, None, ttl=60) + [snapshot(5, [])]
    violations = check(events)
    assert [v.invariant for v in violations] == [6]
    assert "missing" in violations[0].message


def test_a_valid_lock_in_the_snapshot_passes() -> None:
    row = {"resource": "r", "owner": "a.1", "token": 1, "expires_at": at(61)}
    assert check(holder("a", 1, 1, None, ttl=60) + [snapshot(5, [row])]) == []


def test_released_and_expired_locks_may_be_missing() -> None:
    released = holder("a", 1, 1, 2, ttl=60)
    expired = holder("b", 1, 1, None, ttl=2, resource="s")
    assert check(released + expired + [snapshot(5, [])]) == []


def test_a_row_with_a_token_below_one_granted_is_rejected() -> None:
    # b's released lock keeps its row and token 2; a snapshot showing token 1
    # (a's, from before) means b's committed acquisition was lost.
    events = holder("a", 1, 1, 2) + holder("b", 2, 3, 4)
    row = {"resource": "r", "owner": "a.1", "token": 1, "expires_at": at(11)}
    violations = check(events + [snapshot(5, [row])])
    assert [v.invariant for v in violations] == [6]
    assert "below token 2" in violations[0].message
    row |= {"owner": "b.2", "token": 2, "expires_at": at(4)}
    assert check(events + [snapshot(5, [row])]) == []
