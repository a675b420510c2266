"""Library bugs the torture run found, each shown by a small test that fails
until the library is fixed (``xfail(strict=True)``: the fix turns the xfail
into a failure, and the marker is then removed)."""

from __future__ import annotations

import pytest
from django.conf import settings

from tests import workers_torture
from tests.utils import database_settings, run_in_processes, spawn

pytestmark = pytest.mark.django_db(transaction=True)

ON_SQLITE = settings.DATABASES["default"]["ENGINE"].endswith("sqlite3")


@pytest.mark.xfail(
    not ON_SQLITE,
    strict=True,
    raises=AssertionError,
    reason="a purge batch and acquire_all lock several rows in different orders (PostgreSQL: "
    "ctid and name) and deadlock; the database's deadlock error reaches the caller "
    "(PostgreSQL: either; MariaDB, which retries error 1213 in acquire_all: the purge)",
)
def test_purges_beside_all_or_nothing_acquisitions_raise_no_deadlock() -> None:
    """The torture run's PostgreSQL short profile: ``purge_expired()`` and
    ``lock([...])`` raised ``OperationalError: deadlock detected`` (the
    contract: no lost race surfaces as an exception); on MariaDB the purge
    raises error 1213. Two processes purge and two take three of four locks at
    once, until one raises (5 s at most)."""
    start = spawn.Barrier(4)
    results = run_in_processes(
        workers_torture.purge_or_take_all,
        [(database_settings(), purging, 5.0, start) for purging in (True, True, False, False)],
    )
    assert [error for errors in results for error in errors] == []


@pytest.mark.xfail(
    ON_SQLITE,
    strict=True,
    raises=AssertionError,
    reason="SQLite: a release hands the lock to a reentrant waiter while the waiter's own "
    "take is under way; the take then finds it the holder and adds a hold: one entry holds "
    "twice, its exit answers DECREMENTED (LockExpired) and the lock stays held after it",
)
def test_a_reentrant_waiter_handed_the_lock_holds_it_once() -> None:
    """The torture run's SQLite long profile (dev run): a ``lock(reentrant=True)``
    that waited behind a reader was granted with a hold count of 2; its exit
    raised ``LockExpired`` and its owner kept the lock until the ttl ran out.
    Three processes enter ``lock(reentrant=True)`` and three read beside them
    (a reader admitted beside others wakes the head of the queue early), until
    one entry holds twice (6 s at most)."""
    start, found = spawn.Barrier(6), spawn.Event()
    readers = (False, False, False, True, True, True)
    results = run_in_processes(
        workers_torture.reenter_or_read,
        [(database_settings(), reader, 6.0, start, found) for reader in readers],
    )
    assert [wrong for process in results for wrong in process] == []
