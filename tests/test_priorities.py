"""``lock(..., priority=N)``: higher first in the wait queue, first come first
served within a priority, and a step of priority worth a minute of waiting,
so that no waiter starves (``backends.tickets.PRIORITY_STEP``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

import pytest

from django_dlock import InvalidArgument, lock
from django_dlock.backends import backend_for
from django_dlock.backends.tickets import PRIORITY_STEP, TICKET_SPREAD
from django_dlock.conf import conf
from django_dlock.models import DistributedLock, LockWaiter
from django_dlock.rules.claim import Claim
from tests import workers_waiting
from tests.docs_utils import run_example
from tests.lock_cases import paths
from tests.testapp.models import Counter
from tests.utils import database_settings, run_in_thread, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def queued_are(count: int) -> Callable[[], bool]:
    return waiters_of("prio:1", count)


def test_higher_priority_first_and_first_come_first_served_within_one() -> None:
    Counter.objects.create(name="prio:1")
    Locks.acquire("prio:1", owner="holder", ttl=60)
    waiters = []
    try:
        for queued, (name, priority) in enumerate(
            [("low-1", 0), ("high-1", 5), ("low-2", 0), ("high-2", 5)], start=1
        ):
            waiter = spawn.Process(
                target=workers_waiting.wait_and_record,
                args=(database_settings(), "prio:1", priority, name),
                daemon=True,
            )
            waiter.start()
            waiters.append(waiter)
            wait_for(queued_are(queued), 30, f"{name} queued")
        Locks.release("prio:1", "holder")
        for waiter in waiters:
            waiter.join(60)
    finally:
        for waiter in waiters:
            waiter.kill()
    turns = dict(Counter.objects.filter(name__startswith="prio:1:").values_list("name", "value"))
    order = sorted(turns, key=turns.__getitem__)
    assert order == ["prio:1:high-1", "prio:1:high-2", "prio:1:low-1", "prio:1:low-2"]


def test_a_step_of_priority_is_worth_a_minute_of_waiting() -> None:
    queue = backend_for(conf.DATABASE).queue
    claim = Claim(resource="prio:2", owner="a", duration=timedelta(seconds=30))
    older, _ = queue.enqueue_waiter(claim, 30)
    newer, _ = queue.enqueue_waiter(replace(claim, owner="b", priority=1), 30)
    # Queued after it, yet ahead: as if it had queued a minute earlier, no more.
    assert newer < older
    minute = PRIORITY_STEP // timedelta(microseconds=1) * TICKET_SPREAD
    assert older - newer < minute
    assert older - newer > minute - 10_000_000 * TICKET_SPREAD  # within 10 s of it


def test_a_waiters_take_is_refused_once_a_higher_priority_queued_ahead() -> None:
    """A writer that looked and saw itself the head, then tries: a waiter of a
    higher priority queued ahead of it meanwhile. The take decides the head
    under the row's lock (every path: the portable one, and MariaDB's statement
    that a head woken at the gate sends without a look first), so it is refused
    and keeps its ticket; once the other left, it takes and leaves the queue."""
    Locks.acquire("prio:head", owner="before", ttl=30)
    Locks.release("prio:head", "before")  # a row, released
    backend = backend_for(conf.DATABASE)
    claim = Claim(resource="prio:head", owner="a", duration=timedelta(seconds=30))
    mine, state = backend.queue.enqueue_waiter(claim, 30)
    assert state.ahead == 0  # the head, as it looked
    ahead, _ = backend.queue.enqueue_waiter(replace(claim, owner="b", priority=1), 30)
    for take in paths(backend, "take").values():
        assert take(replace(claim, ticket=mine)).row is None
    assert LockWaiter.objects.filter(id=mine).exists()
    backend.queue.leave_queue(ahead)
    taken = backend.take(replace(claim, ticket=mine))
    assert taken.row is not None and taken.row.owner == "a"
    assert not LockWaiter.objects.exists()


@pytest.mark.parametrize("priority", [1.5, "1", True, 1001, -1001])
def test_a_priority_is_a_whole_number_in_range(priority: object) -> None:
    with pytest.raises(InvalidArgument):
        lock("prio:3", priority=priority)  # type: ignore[arg-type]


def test_the_recipe_puts_a_checkout_ahead_of_the_batch_queued_before_it() -> None:
    entered: list[str] = []

    def current_price(sku: str) -> int:
        entered.append("checkout")
        return 100

    recipe = run_example(
        "checkout first",
        recompute_price=lambda sku: entered.append("batch"),
        current_price=current_price,
    )
    Locks.acquire("pricing:mug", owner="holder", ttl=60)
    batch = []
    for queued in range(1, 4):
        batch.append(run_in_thread(lambda outcome: recipe["reprice"]("mug")))
        wait_for(waiters_of("pricing:mug", queued), 30, f"batch waiter {queued} queued")
    checkout = run_in_thread(lambda outcome: recipe["checkout_price"]("mug"))
    wait_for(waiters_of("pricing:mug", 4), 30, "the checkout queued")
    Locks.release("pricing:mug", "holder")
    for outcome in [checkout, *batch]:
        outcome["thread"].join(30)
        assert "error" not in outcome, outcome["error"]
    assert checkout["result"] == 100
    assert entered == ["checkout", "batch", "batch", "batch"]


def waiters_of(resource: str, count: int) -> Callable[[], bool]:
    return lambda: LockWaiter.objects.filter(resource=resource).count() == count
