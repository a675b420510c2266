"""SQLite's common exclusive take and release are one statement each
(``backends/sqlite/alone.py``); every other case is decided by the portable
operation after it, with the same answers and signals."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_dlock.models import DistributedLock
from django_dlock.rules import ReleaseResult
from django_dlock.signals import lock_taken_over
from tests.utils import expire

pytestmark = [pytest.mark.requires_sqlite, pytest.mark.django_db(transaction=True)]


def test_a_take_of_a_released_lock_and_its_release_are_one_statement_each() -> None:
    first = DistributedLock.objects.acquire("job", owner="a", ttl=30)  # the row is made
    assert first is not None
    assert DistributedLock.objects.release("job", owner="a") is ReleaseResult.RELEASED
    with CaptureQueriesContext(connection) as taking:
        lock = DistributedLock.objects.acquire("job", owner="b", ttl=30)
    with CaptureQueriesContext(connection) as releasing:
        released = DistributedLock.objects.release("job", owner="b")
    assert [query["sql"].split()[0] for query in taking] == ["INSERT"]
    assert [query["sql"].split()[0] for query in releasing] == ["UPDATE"]
    assert lock is not None and lock.fencing_token == first.fencing_token + 1
    assert released is ReleaseResult.RELEASED
    assert DistributedLock.objects.get(resource="job").owner == ""


def test_the_cases_the_statement_leaves_are_decided_as_before() -> None:
    # On the driver's connection (nothing watches Django's cursor here).
    lock = DistributedLock.objects.acquire("job", owner="a", ttl=30)
    assert lock is not None
    again = DistributedLock.objects.acquire("job", owner="a", ttl=30, reentrant=True)
    assert again is not None and again.fencing_token == lock.fencing_token
    assert again.hold_count == 2
    assert DistributedLock.objects.acquire("job", owner="b", ttl=30) is None
    assert DistributedLock.objects.release("job", owner="b") is ReleaseResult.FORBIDDEN
    assert DistributedLock.objects.release("job", owner="a") is ReleaseResult.DECREMENTED
    expire("job")
    seen: list[Any] = []

    def taken_over(**kwargs: Any) -> None:
        seen.append(kwargs["previous_owner"])

    lock_taken_over.connect(taken_over, weak=False)
    try:
        taker = DistributedLock.objects.acquire("job", owner="b", ttl=30)
    finally:
        lock_taken_over.disconnect(taken_over)
    assert taker is not None and taker.fencing_token == lock.fencing_token + 1
    assert seen == ["a"]
    assert DistributedLock.objects.release("job", owner="a") is ReleaseResult.FORBIDDEN
    assert DistributedLock.objects.release("job", owner="b") is ReleaseResult.RELEASED
    assert DistributedLock.objects.release("job", owner="b") is ReleaseResult.NOT_FOUND
