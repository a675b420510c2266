"""While a ``held.atomic()`` block is open, every way of taking the lock over or
deleting its row waits for the block's end or is refused, also once the lease
has run out inside the block: the one-statement takes of PostgreSQL and
MariaDB, the portable ones (shared, semaphore, several at once), the waiting
``lock()``, the operator's force-release, the purge and a queryset's delete."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from django_dlock import lock
from django_dlock.models import DistributedLock
from tests.testapp.models import Counter
from tests.utils import run_in_thread

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects
R = "guarded:takes"
TTL = 0.5


def _waiting_lock() -> Any:
    with lock(R, owner="other", ttl=30, timeout=10) as held:
        return held


TAKES: dict[str, Callable[[], Any]] = {
    "acquire": lambda: Locks.acquire(R, owner="other", ttl=30),
    "acquire shared": lambda: Locks.acquire(R, owner="other", ttl=30, shared=True),
    "acquire semaphore": lambda: Locks.acquire(R, owner="other", ttl=30, limit=2),
    "acquire_all": lambda: Locks.acquire_all([R, f"{R}:b"], owner="other", ttl=30),
    "lock() waiting": _waiting_lock,
    "force_release": lambda: Locks.force_release(R),
    "purge_expired": lambda: Locks.purge_expired(),
    "purgeable().delete()": lambda: Locks.purgeable().delete()[0],
}


@pytest.mark.parametrize("take", list(TAKES))
def test_no_take_or_purge_lands_while_the_block_is_open(take: str) -> None:
    hold = Locks.acquire(R, owner="me", ttl=TTL)
    assert hold is not None
    with hold.atomic():
        time.sleep(TTL + 0.1)  # the lease runs out inside the block
        other = run_in_thread(lambda outcome: TAKES[take]())
        other["thread"].join(0.3)
        during = dict(other)  # what it had done while the block was open
        Counter.objects.create(name=R)
        # Nothing else committed meanwhile: the row is still this holder's.
        assert list(Locks.filter(resource=R).values_list("owner", flat=True)) == ["me"]
    other["thread"].join(30)
    assert "error" not in other, other.get("error")
    if "result" in during:  # done while the block was open: only as a refusal
        assert during["result"] in (None, 0, False), during["result"]
    # The block committed: it ended within the lease plus GRACE (about TTL + 0.4 s, GRACE is 1 s).
    assert Counter.objects.filter(name=R).exists()
