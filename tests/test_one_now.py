"""A lock transaction decides on one now: the one read with the resource's row,
by its first statement. The shared holds, read by a later statement, are judged
valid at that now, not at their own statement's later one; else a reader's hold
that expired between the two statements would be valid to the decision (the
row covers it) yet missing from it, and a writer admitted beside the reader.
(The torture run found that overlap, a millisecond long, on SQLite.)

Each operation below is the portable one (every database runs it for shared
holds); its decision's now is moved to a millisecond before the reader's hold
expires, after the database's clock has passed that expiry.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS

from django_dlock.backends import backend_for
from django_dlock.backends.base import LockBackend
from django_dlock.backends.results import LockRow
from django_dlock.models import DistributedLock, ReleaseResult
from django_dlock.rules.claim import Claim
from django_dlock.rules.clock import database_now
from tests.utils import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

RESOURCE = "one-now"


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> LockBackend:
    """The backend, its decisions' now a millisecond before the reader's hold expires."""
    reader = DistributedLock.objects.acquire(RESOURCE, owner="reader", ttl=0.3, shared=True)
    assert reader is not None
    backend = backend_for(DEFAULT_DB_ALIAS)
    read_row = backend.rows.select_for_update

    def row_as_the_reader_held_it(resource: str, *, nowait: bool = False) -> LockRow | None:
        row = read_row(resource, nowait=nowait)
        return (
            None if row is None else replace(row, now=reader.expires_at - timedelta(milliseconds=1))
        )

    wait_for(lambda: database_now(DEFAULT_DB_ALIAS) > reader.expires_at, 5, "the hold to expire")
    monkeypatch.setattr(backend.rows, "select_for_update", row_as_the_reader_held_it)
    return backend


def test_a_writer_is_refused_beside_a_reader_valid_at_the_decisions_now(
    backend: LockBackend,
) -> None:
    claim = Claim(resource=RESOURCE, owner="writer", duration=timedelta(seconds=5))

    assert LockBackend.take(backend, claim).row is None


def test_the_reader_renews_and_releases_a_hold_valid_at_the_decisions_now(
    backend: LockBackend,
) -> None:
    renewed = LockBackend.extend(backend, RESOURCE, "reader", timedelta(seconds=5))
    assert renewed.row is not None and renewed.row.owner == "reader"

    released = LockBackend.give_up(backend, RESOURCE, "reader")
    assert released.result is ReleaseResult.RELEASED
