"""The torture run's checker on synthetic histories of holds with a
lock-delay (invariant 16): a hold lost by expiry or by a force-release keeps
every next grant out until its end + the delay; a release by its holder
leaves none. Each case passes a clean history and rejects a broken one."""

from __future__ import annotations

import pytest

from tools.torture.check_delays import losses
from tools.torture.checker import check
from tools.torture.sections import read
from tools.torture.synthetic import Events, at, force_release, holder, invariants, reader

pytestmark = pytest.mark.vendor_independent


def lost(ttl: float = 1, delay: float = 0.5) -> Events:
    """A holder granted at 1 with ``delay`` whose lease ran out at 1 + ``ttl``:
    its release, after that, found nothing."""
    return holder("a", 1, 1, 1 + ttl, ttl=ttl, lock_delay=delay, released="not_found")


def test_a_grant_when_the_delay_after_an_expiry_ends_passes() -> None:
    events = lost() + holder("b", 2, 2.5, 3)  # expired at 2, delay 0.5
    assert check(events) == []
    (loss,) = losses(read(events))
    assert loss.following is not None and not loss.forced


def test_a_grant_inside_the_delay_after_an_expiry_is_rejected() -> None:
    violations = check(lost() + holder("b", 2, 2.3, 3))
    assert [v.invariant for v in violations] == [16]
    assert "0.200000 s inside the lock-delay of 0.5 s of token 1, expired" in violations[0].message


def test_a_reader_is_kept_out_too() -> None:
    assert invariants(lost() + reader("b", 2, 2.4, 3)) == [16]


def test_a_holder_killed_holding_is_lost_at_its_expiry() -> None:
    killed = holder("a", 1, 1, None, ttl=1, lock_delay=0.5)
    killed.append({"p": "runner", "op": "killed", "target": "a", "t": 1.5})
    assert invariants(killed + holder("b", 2, 2.1, 3)) == [16]
    assert check(killed + holder("b", 2, 2.5, 3)) == []


def test_a_release_by_the_holder_leaves_no_delay() -> None:
    released = holder("a", 1, 1, 1.5, ttl=1, lock_delay=0.5)  # released at 1.5
    assert check(released + holder("b", 2, 1.6, 2)) == []


def test_a_release_that_raised_may_have_cleared_the_delay() -> None:
    events = holder("a", 1, 1, 1.5, ttl=1, lock_delay=0.5)
    events[-1] = {k: v for k, v in events[-1].items() if k != "result"}
    events[-1]["error"] = {"class": "OperationalError", "message": "gone", "db": True}
    assert check(events + holder("b", 2, 1.6, 2)) == []


def test_a_force_release_starts_the_delay_at_its_moment() -> None:
    held = holder("a", 1, 1, 1.9, ttl=10, lock_delay=0.5, released="not_found", told=True)
    forced = force_release(1.2, 1.21, db_now=at(1.2))
    assert check([*held, forced, *holder("b", 2, 1.7, 2)]) == []
    violations = check([*held, forced, *holder("b", 2, 1.6, 2)])
    assert [v.invariant for v in violations] == [16]
    assert "force-released at" in violations[0].message


def test_a_force_release_of_another_holder_does_not_count() -> None:
    held = lost()
    forced = force_release(1.2, 1.21, db_now=at(1.2), owner="x.9")
    assert invariants([*held, forced, *holder("b", 2, 2.3, 3)]) == [16]
    assert check([*held, forced, *holder("b", 2, 2.5, 3)]) == []


def test_a_lock_grant_is_timed_by_its_expiry_less_its_ttl() -> None:
    following = holder("b", 2, 2.3, 3, kind="leader", ttl=1)
    following[0]["lock"]["acquired_at"] = None  # lock() does not say
    assert invariants(lost() + following) == [16]


def test_a_hold_without_a_delay_is_not_checked() -> None:
    plain = holder("a", 1, 1, 2, ttl=1, released="not_found")
    assert check(plain + holder("b", 2, 2.01, 3)) == []


def test_a_force_release_after_the_next_grant_does_not_count() -> None:
    # Without db_now a force-release would move the start back to the grant (1).
    later = force_release(2.6, 2.61)
    assert invariants([*lost(), *holder("b", 2, 2.3, 2.5), later]) == [16]
    assert check([*lost(), force_release(1.5, 1.51), *holder("b", 2, 2.3, 2.5)]) == []
