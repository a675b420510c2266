"""Leader election: a label in public, waiting without end, the holder told at
once when its lease is lost, the term as the fencing token (CONTRACT.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection
from django.db.models import F

from django_dlock import lock, signals
from django_dlock.locking.handle import LockHandle
from django_dlock.models import DistributedLock
from tests.testapp.models import Counter
from tests.utils import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def test_the_label_is_public_and_shown_by_holders() -> None:
    with lock("leader:a", label="web-3 pid 4121") as held:
        [holder] = Locks.holders("leader:a")
        assert holder.label == "web-3 pid 4121" and holder.owner == held.owner
        assert held.label == "web-3 pid 4121"


def test_a_leader_waits_without_end_and_gets_a_larger_term() -> None:
    first = Locks.acquire("leader:b", owner="old", ttl=30)
    assert first is not None
    terms: list[int] = []

    def campaign() -> None:
        try:
            with lock("leader:b", timeout=float("inf"), auto_renew=True, ttl=2) as held:
                terms.append(held.fencing_token)
        finally:
            connection.close()

    candidate = threading.Thread(target=campaign)
    candidate.start()
    time.sleep(0.3)
    assert terms == []  # still waiting
    Locks.release("leader:b", "old")
    candidate.join(10)
    assert terms == [first.fencing_token + 1]


def test_the_holder_is_told_at_once_when_its_lease_is_lost() -> None:
    called: list[LockHandle] = []
    lost: list[dict[str, Any]] = []

    def record(**kwargs: Any) -> None:
        lost.append(kwargs)

    signals.lock_lost.connect(record)
    try:
        with lock("leader:c", ttl=0.9, auto_renew=True, on_lost=called.append) as held:
            Locks.force_release("leader:c")  # an operator deposes the leader
            started = time.monotonic()
            assert held.lost.wait(5)
            assert time.monotonic() - started <= 0.9 / 3 + 0.5  # by the next renewal
            wait_for(lambda: called == [held], what="the callback")
            Locks.acquire("leader:c", owner="next", ttl=30)
    except Exception as error:  # the exit reports the loss too
        assert "lost" in str(error)
    finally:
        signals.lock_lost.disconnect(record)
    assert [kwargs["resource"] for kwargs in lost] == ["leader:c"]


def test_the_term_fences_a_deposed_leaders_writes() -> None:
    """The recipe: store the last term beside the data and refuse an older one
    in the same UPDATE."""
    Counter.objects.create(name="fenced", value=0)

    def write(term: int) -> bool:
        return bool(
            Counter.objects.filter(name="fenced", value__lt=term).update(
                value=F("value") * 0 + term
            )
        )

    old = Locks.acquire("leader:d", owner="old", ttl=30)
    assert old is not None
    Locks.force_release("leader:d")
    new = Locks.acquire("leader:d", owner="new", ttl=30)
    assert new is not None
    assert write(new.fencing_token)
    assert not write(old.fencing_token)  # the deposed leader's write is refused
    assert Counter.objects.get(name="fenced").value == new.fencing_token
