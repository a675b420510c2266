"""``held.atomic()`` with real processes: a holder stopped inside its guarded
block never commits after the next owner's take; while the block is open the
next owner waits or is refused, and takes the lock once the block ends or its
bound has passed; a stock sold under it by eight processes, stopped and killed
at random, is never oversold (CONTRACT.md, "Only in your own database")."""

from __future__ import annotations

import os
import random
import signal
import time
from functools import partial
from typing import Any

import pytest
from django.conf import settings

from django_dlock import lock
from django_dlock.backends.guard import GRACE
from django_dlock.models import DistributedLock
from tests import workers_atomic
from tests.testapp.models import Counter, Product
from tests.utils import database_settings, run_in_thread, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects

ON_SQLITE = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
ON_MYSQL = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.mysql"
# How long after the block began the database ends a stopped holder's
# transaction: the lease (1 s) plus GRACE (MariaDB: in whole seconds, and it
# looks once a second), and a margin for a loaded machine.
BOUND = 1 + GRACE + (1.0 if ON_MYSQL else 0) + 1.5


def start_holder(resource: str, ttl: float, work: float, linger: float = 0) -> tuple[Any, Any]:
    in_block, outcome = spawn.Event(), spawn.Queue()
    holder = spawn.Process(
        target=workers_atomic.write_in_a_guarded_block,
        args=(database_settings(), resource, ttl, work, in_block, outcome, linger),
        daemon=True,
    )
    holder.start()
    assert in_block.wait(60), "the holder never entered its block"
    return holder, outcome


def take_in_a_thread(resource: str) -> dict[str, Any]:
    """The next owner, in a thread: ``lock()`` with a wait, a guarded write of
    its own (``<resource>:next``); when it took the lock (monotonic)."""

    def take(outcome: dict[str, Any]) -> float:
        with lock(resource, owner="next", ttl=30, timeout=30) as held:
            taken = time.monotonic()
            with held.atomic():
                Counter.objects.create(name=f"{resource}:next")
        return taken

    return run_in_thread(take)


def test_a_holder_stopped_in_its_block_never_commits_after_the_next_take() -> None:
    holder, outcome = start_holder("guarded:1", ttl=1, work=0.3)
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        if not ON_SQLITE:
            # The lease runs out while the block is open: no purge deletes the
            # row, which stays the stopped holder's.
            time.sleep(1.2)
            Locks.purge_expired()
            assert Locks.filter(resource="guarded:1", owner="holder").exists()
        taker = take_in_a_thread("guarded:1")
        if ON_SQLITE:
            # No server ends a stopped process's transaction: the taker waits
            # for the write lock until the holder goes on, past its deadline.
            time.sleep(1 + GRACE + 0.3)
            assert taker["thread"].is_alive()
        else:
            # The database ended the stopped holder's transaction: the next
            # owner took the lock while the holder is still stopped.
            taker["thread"].join(BOUND + 5)
            assert not taker["thread"].is_alive(), "the next owner never took the lock"
            # Not at the lease's end (it waited for the row), nor long after the bound.
            assert 1 + GRACE - 0.5 < taker["result"] - started < BOUND
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    taker["thread"].join(30)
    assert "error" not in taker, taker.get("error")
    assert taker["result"] is not None
    assert outcome.get(timeout=30) != "committed"
    holder.join(30)
    names = set(Counter.objects.filter(name__startswith="guarded:1").values_list("name", flat=True))
    assert names == {"guarded:1:next"}  # nothing of the holder's landed


def test_while_the_block_is_open_the_next_take_is_refused_then_it_succeeds() -> None:
    holder, outcome = start_holder("guarded:2", ttl=5, work=0.8, linger=0.5)
    # Refused, from the row as it is (PostgreSQL), or once the block ended.
    assert Locks.acquire("guarded:2", owner="next", ttl=5) is None
    assert outcome.get(timeout=30) == "committed"
    holder.join(30)
    assert Locks.acquire("guarded:2", owner="next", ttl=5) is not None  # released on exit
    assert Counter.objects.filter(name__startswith="guarded:2:").count() == 2


SOLD_OUT = object()


def holding(sellers: dict[int, Any]) -> Any:
    """The seller that holds ``stock:guarded-3`` (its label is its process id),
    ``SOLD_OUT`` once the stock is sold, else None."""
    if not Product.objects.get(sku="guarded-3").stock:
        return SOLD_OUT
    label = (
        Locks.filter(resource="stock:guarded-3")
        .exclude(owner="")
        .values_list("label", flat=True)
        .first()
    )
    return sellers.get(int(label)) if label else None


@pytest.mark.parametrize("guarded", [True])
def test_a_stock_sold_under_the_lock_by_stopped_and_killed_processes_is_never_oversold(
    guarded: bool,
) -> None:
    stock = 20
    Product.objects.create(sku="guarded-3", stock=stock)
    start = spawn.Event()
    sellers = [
        spawn.Process(
            target=workers_atomic.sell,
            args=(database_settings(), "guarded-3", seed, start, guarded),
            daemon=True,
        )
        for seed in range(8)
    ]
    for seller in sellers:
        seller.start()
    start.set()
    rng = random.Random(47)
    faults, struck = ["kill", "stop", "kill"], 0
    try:
        wait_for(lambda: Product.objects.get(sku="guarded-3").stock < stock, 60, "the first sale")
        for fault in faults:
            time.sleep(rng.uniform(0.05, 0.2))
            live = {s.pid: s for s in sellers if s.is_alive() and s.pid is not None}
            # The holder (inside its block most of the time it holds), or the end.
            victim = wait_for(partial(holding, live), 10, "a holder, or none left")
            if victim is SOLD_OUT:
                break
            assert victim.pid is not None
            struck += 1
            if fault == "kill":
                os.kill(victim.pid, signal.SIGKILL)
                continue
            os.kill(victim.pid, signal.SIGSTOP)
            time.sleep(1 + GRACE + 0.5)  # past its lease and the block's bound
            os.kill(victim.pid, signal.SIGCONT)
        for seller in sellers:
            seller.join(60)
            assert not seller.is_alive(), "a seller never finished"
    finally:
        for seller in sellers:
            if seller.is_alive() and seller.pid is not None:
                os.kill(seller.pid, signal.SIGCONT)
                seller.kill()
    assert struck >= 2, "the stock was sold before the faults"
    left = Product.objects.get(sku="guarded-3").stock
    sold = Counter.objects.filter(name__startswith="sale:guarded-3:").count()
    assert left == 0
    assert sold == stock - left  # each sale took one unit: none sold twice
