"""Library bugs the torture run found, each shown by a small test that fails
until the library is fixed (``xfail(strict=True)``: the fix turns the xfail
into a failure, and the marker is then removed)."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import OperationalError

from django_dlock import lock
from django_dlock.exceptions import LockHeldByCaller
from django_dlock.managers import DistributedLockManager
from django_dlock.models import DistributedLock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.xfail(
    strict=True,
    raises=LockHeldByCaller,
    reason="a lock() whose release raised a database error stays registered as held "
    "by its thread: every later lock() of the resource there raises LockHeldByCaller",
)
def test_a_lock_whose_release_failed_does_not_stay_held_by_its_thread() -> None:
    """The torture run's PostgreSQL short profile: a worker's ``lock()`` exit
    met a restart (or a read-only server); for the rest of the run each of its
    ``lock()`` calls on that resource raised ``LockHeldByCaller`` at once,
    though the block had been left. (The lock itself is gone or expires: the
    thread is not inside it any more.)"""
    failure = OperationalError("server closed the connection unexpectedly")
    with (
        pytest.raises(OperationalError),
        mock.patch.object(DistributedLockManager, "release", side_effect=failure),
        lock("found:release-failed", ttl=30),
    ):
        pass
    DistributedLock.objects.force_release("found:release-failed")
    with lock("found:release-failed", ttl=30) as held:
        assert held.resource == "found:release-failed"
