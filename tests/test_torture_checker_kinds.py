"""The torture run's checker on synthetic histories with the lock kinds:
readers, permits, reentrant holds, all-or-nothing calls and leaders. Each
invariant passes a clean history and rejects a broken one."""

from __future__ import annotations

from typing import Any

import pytest

from tools.torture.check_holds import reader_overlaps
from tools.torture.checker import check
from tools.torture.sections import read
from tools.torture.synthetic import (
    Events,
    at,
    force_release,
    holder,
    invariants,
    permit,
    reader,
    snapshot,
)

pytestmark = pytest.mark.vendor_independent

# -- 1: no exclusive hold beside another hold -----------------------------------------


def test_readers_together_pass_and_are_counted() -> None:
    events = reader("a", 1, 1, 3) + reader("b", 2, 2, 4) + holder("w", 3, 5, 6)
    assert check(events) == []
    assert reader_overlaps(read(events)) == (2, 1)


def test_a_writer_beside_a_valid_reader_is_rejected() -> None:
    events = reader("a", 1, 1, 5, released="not_found") + holder("w", 2, 3, 4)
    violations = check(events)
    assert [v.invariant for v in violations] == [1]
    assert "shared" in violations[0].message and "valid until" in violations[0].message


def test_a_reader_beside_a_valid_writer_is_rejected() -> None:
    assert invariants(holder("w", 1, 1, 5, released="not_found") + reader("a", 2, 3, 4)) == [1]


def test_an_expired_reader_told_and_refused_may_overlap_the_next_writer() -> None:
    # a's read hold (ttl 2) expired at 3; w took the lock at 4 and wrote; a,
    # paused, read again at 6: the store refused it (a writer with a larger
    # token had written).
    a = reader(
        "a", 1, 1, 7, ttl=2, reads=((1.1, True), (6, False)), told=True, released="not_found"
    )
    w = holder("w", 2, 4, 8, writes=((4.1, True),))
    assert check(a + w) == []


def test_a_late_read_that_the_store_accepted_is_rejected() -> None:
    a = reader("a", 1, 1, 7, ttl=2, reads=((6, True),), told=True, released="not_found")
    w = holder("w", 2, 4, 8, writes=((4.1, True),))
    violations = check(a + w)
    assert [v.invariant for v in violations] == [1]
    assert "late write(s) or read(s)" in violations[0].message


def test_forcing_one_readers_hold_out_leaves_the_others_valid() -> None:
    force = force_release(2, 2.1, owner="a.1")
    a = reader("a", 1, 1, 7, told=True, released="not_found")
    b = reader("b", 2, 1.5, 7, released="forbidden")
    w = holder("w", 3, 4, 5, released="not_found")
    violations = check([*a, *b, force, *w])
    assert [v.invariant for v in violations] == [1]  # b's hold was valid: w beside b
    assert "b:2" in violations[0].message


# -- 2: tokens across kinds ------------------------------------------------------------


def test_a_writer_with_a_token_below_an_earlier_readers_is_rejected() -> None:
    events = reader("a", 5, 1, 2) + holder("w", 4, 3, 4)
    assert 2 in invariants(events)


def test_the_holder_again_keeps_its_token_after_others_got_larger_ones() -> None:
    a = reader("a", 1, 1, 6)
    b = reader("b", 2, 2, 4)
    again = dict(a[0]) | {"t0": 3, "t1": 3.1, "reentrant": True}
    again["lock"] = dict(a[0]["lock"]) | {"hold_count": 2}
    decremented = dict(a[-1]) | {"t0": 5, "t1": 5.1, "result": "decremented"}
    assert check([*a, *b, again, decremented]) == []


# -- 3: a reader releases its own hold --------------------------------------------------


def test_a_reader_releases_after_another_reader_joined() -> None:
    assert check(reader("a", 1, 1, 4) + reader("b", 2, 2, 3)) == []


def test_a_reader_releases_after_an_earlier_writers_call_returned_late() -> None:
    # w was granted token 1 and force-released; a took token 2, then b joined it
    # (3); w's call returned only after a's: it took nothing from a, whose
    # release is its own.
    w = holder("w", 1, 1, None, ttl=1, told=True)
    w[0]["t1"] = 2.5
    a, b = reader("a", 2, 2.1, 4), reader("b", 3, 2.2, 3)
    assert check(w + [force_release(1.5, 1.6)] + a + b) == []


def test_a_readers_release_after_a_writer_took_the_lock_is_rejected() -> None:
    # a's hold expired (ttl 1) and w took the lock; a's release still said released.
    a = reader("a", 1, 1, 5, ttl=1, told=True)
    w = holder("w", 2, 3, 4)
    assert 3 in invariants(a + w)


# -- 6: a reader's hold in the snapshot --------------------------------------------------


def test_a_valid_readers_hold_missing_from_the_snapshot_is_rejected() -> None:
    header = {"resource": "r", "owner": "django-dlock:shared-holders", "token": 1}
    header |= {"expires_at": at(61)}
    events = reader("a", 1, 1, None, ttl=60)
    assert invariants(events + [snapshot(5, [header], holds=[])]) == [6]
    hold = {"resource": "r", "owner": "a.1", "token": 1, "expires_at": at(61)}
    assert check(events + [snapshot(5, [header], holds=[hold])]) == []


# -- 7: readers ran together ----------------------------------------------------------


def test_readers_that_never_overlapped_prove_nothing() -> None:
    violations = check(reader("a", 1, 1, 2) + reader("b", 2, 3, 4))
    assert [v.invariant for v in violations] == [7]
    assert "none of them beside another" in violations[0].message


def test_readers_of_one_process_or_told_ones_do_not_count_as_together() -> None:
    same_process = reader("a", 1, 1, 3) + reader("a", 2, 2, 4)
    assert reader_overlaps(read(same_process)) == (2, 0)
    lost = reader("a", 1, 1, 3, told=True) + reader("b", 2, 2, 4)
    assert reader_overlaps(read(lost)) == (1, 0)


# -- 8: permits -----------------------------------------------------------------------


def test_two_permits_of_two_at_once_pass() -> None:
    assert check(permit("a", 1, 1, 4) + permit("b", 2, 2, 5) + permit("c", 3, 4.5, 6)) == []


def test_a_third_permit_of_two_is_rejected() -> None:
    events = permit("a", 1, 1, 4) + permit("b", 2, 2, 5) + permit("c", 3, 3, 6)
    violations = check(events)
    assert [v.invariant for v in violations] == [8]
    assert "2 other permits of 2" in violations[0].message


def test_a_permit_that_expired_and_was_told_does_not_count() -> None:
    a = permit("a", 1, 1, 6, ttl=1, told=True, released="not_found")
    assert check(a + permit("b", 2, 2, 5) + permit("c", 3, 3, 6)) == []
    untold = permit("a", 1, 1, 6, ttl=1, released="not_found")
    assert invariants(untold + permit("b", 2, 2, 5) + permit("c", 3, 3, 6)) == [8]


# -- 9: hold counts --------------------------------------------------------------------


def reentrant(counts: list[int], results: list[str]) -> Events:
    """One owner's reentrant acquisitions answering ``counts`` holds, then
    releases answering ``results``."""
    lock = {"owner": "a.1", "token": 1, "acquired_at": at(1), "expires_at": at(30)}
    call = {"p": "a", "resource": "r", "owner": "a.1"}
    events: Events = []
    t = 1.0
    for count in counts:
        events.append(
            call
            | {"op": "acquire", "t0": t, "t1": t + 0.01, "reentrant": True, "ttl": 30}
            | {"lock": lock | {"mode": "exclusive", "hold_count": count}}
        )
        t += 1
    for result in results:
        events.append(call | {"op": "release", "t0": t, "t1": t + 0.01, "result": result})
        t += 1
    return events


def test_reentrant_holds_counted_right_pass() -> None:
    assert check(reentrant([1, 2, 3], ["decremented", "decremented", "released"])) == []


def test_a_reentrant_hold_that_did_not_count_is_rejected() -> None:
    violations = check(reentrant([1, 1], ["released"]))
    assert [v.invariant for v in violations] == [9]
    assert "answered 1 holds, 2 taken" in violations[0].message


def test_a_release_that_answered_released_with_holds_left_is_rejected() -> None:
    violations = check(reentrant([1, 2], ["released", "not_found"]))
    assert [v.invariant for v in violations] == [9]
    assert "RELEASED with 1 hold(s) left" in violations[0].message


def test_the_last_release_answering_decremented_is_rejected() -> None:
    assert invariants(reentrant([1, 2], ["decremented", "decremented"])) == [9]


def test_a_lost_hold_is_counted_no_further() -> None:
    assert check(reentrant([1, 2], ["not_found", "not_found"])) == []


def test_holders_showing_another_count_is_rejected() -> None:
    seen: dict[str, Any] = {"p": "a", "op": "holders", "cs": "a:1", "resource": "r"}
    seen["owner"] = "a.1"
    seen |= {"t0": 2.5, "t1": 2.6, "holds": [{"owner": "a.1", "token": 1, "hold_count": 1}]}
    events = reentrant([1, 2], ["decremented", "released"])
    assert invariants([*events, seen]) == [9]
    seen["holds"][0]["hold_count"] = 2
    assert check([*events, seen]) == []


def test_lock_held_by_caller_outside_any_hold_is_rejected() -> None:
    error = {"class": "LockHeldByCaller", "message": "held by this thread", "db": False}
    call = {"p": "w", "op": "lock", "resource": "r", "owner": "w.9", "t0": 1, "t1": 1.001}
    violations = check([call | {"error": error}])
    assert [v.invariant for v in violations] == [9]


# -- 10: writer preference -------------------------------------------------------------


def queued_writer(t: float, *, token: int | None, until: float, timeout: float = 5) -> Events:
    """A writer whose lock() began at 1, was queued at ``t`` and got ``token``
    at ``until`` (or timed out then, with ``token`` None)."""
    call: dict[str, Any] = {"p": "w", "op": "lock", "resource": "r", "owner": "w.1"}
    call |= {"t0": 1, "t1": until, "timeout": timeout, "ttl": 10}
    if token is None:
        call["error"] = {"class": "LockNotAcquired", "message": "timed out", "db": False}
    else:
        call["lock"] = {"owner": "w.1", "token": token, "acquired_at": None}
        call["lock"] |= {"expires_at": at(until + 10), "mode": "exclusive"}
    queued = {"p": "w", "op": "queued", "resource": "r", "owner": "w.1", "mode": "exclusive"}
    return [call, queued | {"t": t}]


def test_a_reader_that_came_after_a_queued_writer_and_got_in_first_is_rejected() -> None:
    # r0 holds (token 1); w queues at 2; b begins at 3 and is admitted with
    # token 2, before w (token 3).
    events = reader("r0", 1, 1, 4) + reader("b", 2, 3.5, 4, t0=3)
    events += queued_writer(2, token=3, until=4.5)
    violations = check(events)
    assert [v.invariant for v in violations] == [10]
    assert "began after writer w.1 was queued" in violations[0].message


def test_readers_before_the_writer_was_queued_or_after_its_grant_pass() -> None:
    events = reader("r0", 1, 1, 4) + reader("a", 2, 1.8, 3.9, t0=1.5)
    events += queued_writer(2, token=3, until=4.2)
    events += reader("b", 4, 5, 6, t0=3)  # waited behind the writer
    assert check(events) == []


def test_a_reader_admitted_while_a_writer_waited_until_it_timed_out_is_rejected() -> None:
    events = reader("r0", 1, 1, 7) + reader("b", 2, 3.5, 4, t0=3)
    events += queued_writer(2, token=None, until=6.1, timeout=5)
    assert invariants(events) == [10]
    after = reader("r0", 1, 1, 7) + reader("b", 2, 6.5, 7, t0=3)
    assert check(after + queued_writer(2, token=None, until=6.1, timeout=5)) == []


# -- 11: all or nothing ----------------------------------------------------------------


def several(locks: list[dict[str, Any]] | None, modes: list[str]) -> dict[str, Any]:
    call = {"p": "s", "op": "acquire_all", "resources": ["a", "b"], "modes": modes}
    return call | {"owner": "s.1", "set": "s.1", "t0": 1, "t1": 1.1, "ttl": 10, "locks": locks}


def test_a_refused_call_that_left_a_part_held_is_rejected() -> None:
    seen: dict[str, Any] = {"p": "s", "op": "holders", "set": "s.1", "resource": "b"}
    seen["owner"] = "s.1"
    seen |= {"t0": 1.2, "t1": 1.3}
    hold = {"owner": "s.1", "token": 4, "hold_count": 1, "mode": "exclusive"}
    refused = several(None, ["exclusive", "exclusive"])
    violations = check([refused, seen | {"holds": [hold]}])
    assert [v.invariant for v in violations] == [11]
    assert check([refused, seen | {"holds": []}]) == []
    row = {"resource": "a", "owner": "s.1", "token": 3, "expires_at": at(11)}
    assert invariants([refused, snapshot(5, [row])]) == [11]


def test_a_call_that_took_its_locks_answers_each_in_the_mode_asked() -> None:
    lock = {"owner": "s.1", "acquired_at": at(1), "expires_at": at(11), "hold_count": 1}
    locks = [lock | {"token": 1, "mode": "exclusive"}, lock | {"token": 1, "mode": "shared"}]
    assert check([several(locks, ["exclusive", "shared"])]) == []
    assert invariants([several(locks, ["exclusive", "exclusive"])]) == [11]


# -- 12: leaders -----------------------------------------------------------------------


def test_leader_terms_in_succession_pass() -> None:
    events = holder("a", 1, 1, 2, kind="leader", resource="leader")
    events += holder("b", 2, 3, 4, kind="leader", resource="leader")
    assert check(events) == []


def test_two_valid_terms_at_once_are_rejected_as_leaders() -> None:
    events = holder("a", 1, 1, 5, kind="leader", resource="leader", released="not_found")
    events += holder("b", 2, 3, 4, kind="leader", resource="leader")
    violations = check(events)
    assert [v.invariant for v in violations] == [12]
    assert "leader" in violations[0].message


def test_a_later_term_below_an_earlier_one_is_rejected() -> None:
    events = holder("a", 5, 1, 2, kind="leader", resource="leader")
    events += holder("b", 4, 3, 4, kind="leader", resource="leader")
    assert 12 in invariants(events)
    assert 2 not in invariants(events)


def test_a_force_release_during_an_acquisition_in_flight_leaves_the_count_unknown() -> None:
    # An operator force-released the hold at 1.5, while the acquisition that
    # returned at 2 was in flight: a grant before it (SQLite hands the lock to
    # a waiter) or this one? The count goes no further.
    events = reentrant([1, 2], ["decremented", "released"])
    events[0] |= {"t0": 1, "t1": 2}
    seen: dict[str, Any] = {"p": "a", "op": "holders", "cs": "a:1", "resource": "r"}
    seen |= {"owner": "a.1", "t0": 2.1, "t1": 2.2}
    seen["holds"] = [{"owner": "a.1", "token": 1, "hold_count": 2}]
    assert check([*events, force_release(1.5, 1.6, owner="a.1"), seen]) == []


def test_a_reentry_that_took_a_new_grant_is_rejected() -> None:
    section = holder("a", 1, 1, 5)
    seen: dict[str, Any] = {"p": "a", "op": "holders", "cs": "a:1", "resource": "r"}
    seen |= {"owner": "a.1", "t0": 2, "t1": 2.1, "depth": 2}
    seen["holds"] = [{"owner": "a.1", "token": 3, "hold_count": 1}]
    violations = check([*section, seen])
    assert [v.invariant for v in violations] == [9]
    assert "a re-entry took a new grant" in violations[0].message


def test_a_wait_that_queued_twice_is_judged_from_its_last_ticket() -> None:
    # The torture run's SQLite long profile: w's first ticket INSERT (at 2)
    # was rolled back, its COMMIT busy with a reader, and inserted again at
    # 3.2; reader b, who began at 3, came in first, rightly. A reader that
    # began after the second ticket and got in first is still caught.
    requeued = {"p": "w", "op": "queued", "resource": "r", "owner": "w.1", "mode": "exclusive"}
    events = reader("r0", 1, 1, 4) + reader("b", 2, 3.1, 3.9, t0=3)
    events += [*queued_writer(2, token=3, until=4.5), requeued | {"t": 3.2}]
    assert 10 not in invariants(events)
    late = reader("r0", 1, 1, 4) + reader("b", 2, 3.5, 3.9, t0=3.3)
    late += [*queued_writer(2, token=3, until=4.5), requeued | {"t": 3.2}]
    assert invariants(late) == [10]


def test_a_grant_no_acquisition_returned_may_have_taken_the_writer_out_of_the_queue() -> None:
    # Token 2 went to nobody in the history: a release handed the lock to the
    # queued writer (its ticket left), then an operator took it away; reader b
    # (token 3) came in before the writer's own grant (4).
    events = reader("r0", 1, 1, 2.5) + reader("b", 3, 3.5, 4, t0=3)
    events += queued_writer(2, token=4, until=4.5)
    assert invariants(events) == [7]  # (the two readers never met: no 10)


def test_a_writers_reentry_is_not_its_wait() -> None:
    # w's lock() was queued at 2 and granted token 3 at 2.5; a re-entry at 4
    # (depth 2) was refused. Reader b (token 4, began at 3) came after the grant.
    events = queued_writer(2, token=3, until=2.5)
    reentry = {"p": "w", "op": "lock", "resource": "r", "owner": "w.1", "t0": 4, "t1": 4.1}
    reentry |= {"depth": 2, "error": {"class": "LockNotAcquired", "message": "", "db": False}}
    events += [reentry, *reader("r0", 1, 1, 1.9), *reader("b", 4, 3.5, 4, t0=3)]
    assert 10 not in invariants(events)
