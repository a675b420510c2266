"""Tests that tests/test_testing_kit.py runs in a pytest of their own (not collected here:
their names do not start with ``test_``). Each test's expected outcome is in its name:
``test_pass_*`` passes, ``test_fail_*`` fails, ``test_error_*`` errors at teardown."""

from __future__ import annotations

import threading

import pytest
from django.db import connections, transaction
from django.test import TestCase, TransactionTestCase

from django_dlock import LockNotAcquired, LockTransactionError, lock, once_per
from django_dlock.models import DistributedLock
from django_dlock.testing import DlockTestMixin, advance_lock_clock

Locks = DistributedLock.objects


def in_another_thread(function):
    """``function()`` on another thread, so on another database connection."""
    out = []

    def run():
        try:
            out.append(function())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def test_pass_hold_refuses_the_code_then_release_frees(dlock):
    held = dlock.hold("job:1", label="other-host")
    assert Locks.acquire("job:1", ttl=30) is None
    assert dlock.is_held("job:1")
    [hold] = Locks.holders("job:1")
    assert hold.label == "other-host" and hold.owner == held.owner
    with pytest.raises(LockNotAcquired), lock("job:1"):
        pass
    held.release()
    assert not dlock.is_held("job:1")
    with lock("job:1"):
        pass


def test_fail_holding_a_held_lock(dlock):
    Locks.acquire("job:2", "owner-secret", ttl=30)
    dlock.hold("job:2")


def test_pass_shared_holds_admit_readers_only(dlock):
    dlock.hold("doc:1", shared=True)
    dlock.hold("doc:1", shared=True)
    assert Locks.acquire("doc:1", ttl=30) is None
    assert Locks.acquire("doc:1", ttl=30, shared=True) is not None


def test_pass_release_by_resource(dlock):
    dlock.hold("job:3")
    dlock.release("job:3")
    with lock("job:3"):
        pass


def test_pass_ran_under(dlock):
    with dlock.assert_ran_under("job:4") as seen, lock("job:4"):
        pass
    assert seen.acquired() == ["job:4"]


def test_fail_ran_under_another_lock(dlock):
    with dlock.assert_ran_under("job:5"), lock("job:other"):
        pass


def test_fail_ran_under_but_left_it_held(dlock):
    with dlock.assert_ran_under("job:6"):
        Locks.acquire("job:6", ttl=30)


def test_pass_ran_under_left_held_when_allowed(dlock):
    with dlock.assert_ran_under("job:7", released=False):
        Locks.acquire("job:7", ttl=30)


def test_fail_assert_not_locked(dlock):
    with dlock.assert_not_locked("job:8"), lock("job:8"):
        pass


def test_pass_record_in_order(dlock):
    with dlock.record() as seen, lock("a:1"), lock("b:1"):
        pass
    assert seen.acquired() == ["a:1", "b:1"]
    assert seen.released() == ["b:1", "a:1"]
    assert {event.kind for event in seen.events} == {"acquired", "released"}


def test_pass_advance_expires_a_lock(dlock):
    dlock.hold("exp:1", ttl=60)
    dlock.advance(59)
    assert Locks.acquire("exp:1", ttl=30) is None
    dlock.advance(1)
    assert Locks.acquire("exp:1", ttl=30) is not None


def test_fail_advance_short_of_the_ttl(dlock):
    dlock.hold("exp:2", ttl=60)
    dlock.advance(30)
    assert Locks.acquire("exp:2", ttl=30) is not None


def test_pass_advance_ends_a_lock_delay(dlock):
    Locks.acquire("delay:1", "gone", ttl=10, lock_delay=30)
    dlock.advance(10)  # the lease ran out: the delay runs 30 s more
    assert Locks.acquire("delay:1", ttl=10) is None
    dlock.advance(29)
    assert Locks.acquire("delay:1", ttl=10) is None
    dlock.advance(1)
    assert Locks.acquire("delay:1", ttl=10) is not None


def test_pass_advance_closes_a_once_per_window(dlock):
    with once_per("digest", every=3600) as due:
        assert due
    with once_per("digest", every=3600) as due:
        assert not due
    dlock.advance(3600)
    with once_per("digest", every=3600) as due:
        assert due


def test_pass_the_clock_only_moves_forward(dlock):
    with pytest.raises(ValueError, match="forward"):
        dlock.advance(-1)


@pytest.mark.django_db(transaction=True)
def test_pass_transactional_hold_seen_by_another_connection(dlock):
    dlock.hold("tx:1")
    assert in_another_thread(lambda: Locks.acquire("tx:1", ttl=5)) is None
    advance_lock_clock(60)
    assert in_another_thread(lambda: Locks.acquire("tx:1", ttl=5)) is not None


@pytest.mark.django_db(transaction=True)
def test_pass_a_waiter_is_served_when_the_kit_releases(dlock):
    held = dlock.hold("tx:2")
    timer = threading.Timer(0.2, lambda: in_another_thread(held.release))
    timer.start()
    with lock("tx:2", timeout=30) as handle:
        assert handle.fencing_token > held.fencing_token
    timer.join()


def test_pass_a_lock_in_the_codes_own_atomic_is_refused_in_a_testcase(dlock):
    with pytest.raises(LockTransactionError), transaction.atomic(), lock("tx:3"):
        pass


@pytest.mark.django_db(transaction=True)
def test_pass_a_lock_in_the_codes_own_atomic_is_refused_in_a_transactional_test(dlock):
    with pytest.raises(LockTransactionError), transaction.atomic(), lock("tx:4"):
        pass


@pytest.mark.dlock_no_leaks
def test_error_marker_finds_a_leak(db):
    Locks.acquire("leak:1", ttl=30)


@pytest.mark.dlock_no_leaks
def test_pass_marker_kit_holds_are_no_leak(dlock):
    dlock.hold("leak:2")


@pytest.mark.dlock_no_leaks
def test_pass_marker_released_is_no_leak(db):
    with lock("leak:3"):
        pass


def test_error_fixture_finds_a_leak(db, dlock_no_leaks):
    Locks.acquire("leak:4", ttl=30)


def test_pass_fixture_after_the_kit(dlock, dlock_no_leaks):
    dlock.hold("leak:5")


def test_pass_an_expired_lock_is_no_leak(dlock_no_leaks, dlock):
    Locks.acquire("leak:6", ttl=30)
    dlock.advance(30)


@pytest.mark.dlock_no_leaks
@pytest.mark.django_db(transaction=True)
def test_error_marker_finds_a_leak_in_a_transactional_test():
    Locks.acquire("leak:7", ttl=30)


def test_pass_no_marker_no_check(db):
    Locks.acquire("leak:8", ttl=30)


class MixinTests(DlockTestMixin, TestCase):
    def test_pass_kit_in_a_testcase(self):
        self.dlock.hold("m:1")
        self.assertIsNone(Locks.acquire("m:1", ttl=5))
        self.dlock.advance(60)
        self.assertIsNotNone(Locks.acquire("m:1", ttl=5))


class LeakyMixinTests(DlockTestMixin, TestCase):
    dlock_fail_on_leaked_locks = True

    def test_fail_leaves_a_lock(self):
        Locks.acquire("m:2", ttl=30)

    def test_pass_kit_holds_are_no_leak(self):
        self.dlock.hold("m:3")


class LeakyTransactionalMixinTests(DlockTestMixin, TransactionTestCase):
    dlock_fail_on_leaked_locks = True

    def test_fail_leaves_a_lock(self):
        Locks.acquire("m:4", ttl=30)

    def test_pass_releases(self):
        with lock("m:5"):
            pass
