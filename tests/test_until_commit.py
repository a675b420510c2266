"""``lock(..., until="commit")``: inside ``atomic()``, the lock is held until
that transaction ends, released after its commit or its rollback, so the next
holder reads what the transaction wrote (django-pglocks#15's lost update). On
PostgreSQL and MariaDB; SQLite refuses it, with the way that works there."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError, connection, transaction

from django_dlock import lock
from django_dlock.exceptions import (
    InvalidArgument,
    LockHeldByCaller,
    LockNotAcquired,
    LockTransactionError,
)
from django_dlock.locking import context, min_hold
from django_dlock.models import DistributedLock
from tests import workers_until_commit
from tests.docs_utils import run_example
from tests.testapp.models import Counter, Product
from tests.utils import database_settings, run_in_processes, run_in_thread, spawn, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects

ON_SQLITE = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
beside_transactions = pytest.mark.skipif(ON_SQLITE, reason="SQLite refuses until='commit'")


def held_by_another(resource: str) -> bool:
    """Whether another connection (a thread's) finds ``resource`` held: its
    acquire is refused (if not, it releases what it took)."""

    def refused(outcome: dict[str, object]) -> bool:
        if Locks.acquire(resource, owner="other", ttl=30) is None:
            return True
        Locks.release(resource, owner="other")
        return False

    outcome = run_in_thread(refused)
    outcome["thread"].join(10)
    return bool(outcome["result"])


@beside_transactions
def test_no_update_is_lost_between_transactions_that_lock_until_commit() -> None:
    Counter.objects.create(name="until:1")
    start = spawn.Event()
    args = (database_settings(), "until:1", 15, start)
    start.set()
    tokens = run_in_processes(workers_until_commit.increment_in_transactions, [args, args])
    assert Counter.objects.get(name="until:1").value == 30
    assert len(set(tokens[0] + tokens[1])) == 30


@beside_transactions
def test_the_lock_is_held_past_the_block_until_the_commit() -> None:
    with transaction.atomic():
        with lock("until:2", ttl=30, until="commit") as held:
            pass
        assert held_by_another("until:2")  # the block ended; the transaction did not
        assert not held.lost.is_set()
    assert not Locks.active().filter(resource="until:2").exists()  # released on commit
    assert not held.lost.is_set()


@beside_transactions
def test_the_commit_returns_once_every_lock_is_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """Django empties the list of commit callbacks before it runs them: the
    watcher may take the release of the second lock while the first one's
    callback runs. The commit still returns after both releases, so that the
    thread's next transaction may take them again (the move-stock recipe's
    test raised LockHeldByCaller now and then)."""
    real_release = min_hold.release_or_keep

    def slow(using: str, handle: Any, min_hold: Any) -> Any:
        time.sleep(0.3)  # long enough for the watcher to look meanwhile
        return real_release(using, handle, min_hold)

    monkeypatch.setattr(context, "release_or_keep", slow)
    with (
        transaction.atomic(),
        lock("until:11", ttl=30, until="commit"),
        lock("until:12", ttl=30, until="commit"),
    ):
        pass
    assert not Locks.active().filter(resource__in=["until:11", "until:12"]).exists()
    with transaction.atomic(), lock("until:12", ttl=30, until="commit"):
        pass  # not LockHeldByCaller


@beside_transactions
@pytest.mark.parametrize("where", ["transaction", "savepoint"])
def test_a_rollback_releases_the_lock(where: str) -> None:
    class Undo(Exception):
        pass

    with transaction.atomic():
        with pytest.raises(Undo), transaction.atomic():
            with lock("until:3", ttl=30, until="commit"):
                pass
            assert held_by_another("until:3")
            raise Undo  # the savepoint (or, below, the whole transaction) rolls back
        if where == "savepoint":
            # Released while the outer transaction goes on.
            wait_for(lambda: not Locks.active().filter(resource="until:3").exists(), 5)
            assert not held_by_another("until:3")
        else:
            transaction.set_rollback(True)
    wait_for(lambda: not Locks.active().filter(resource="until:3").exists(), 5, "released")


@beside_transactions
def test_the_thread_may_take_the_lock_again_at_once_after_a_rollback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The watcher would release it within its tick: make that tick long, so
    # that only the retry's own release can let it in.
    monkeypatch.setattr("django_dlock.locking.until_commit.WATCH_EVERY", 60.0)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic(), lock("until:retry", ttl=30, until="commit"):
        raise Undo  # as after LockDeadlock: the move rolls back, to be retried
    # The retry, at once, in the same thread.
    with transaction.atomic(), lock("until:retry", ttl=30, until="commit") as held:
        assert held.fencing_token == 2
    wait_for(lambda: not Locks.active().filter(resource="until:retry").exists(), 5, "released")


@beside_transactions
@pytest.mark.parametrize(
    ("how", "runs"), [("rollback", 8), ("rollback in a thread", 3), ("commit in a thread", 3)]
)
def test_a_transaction_that_ends_as_its_process_exits_releases_the_lock(
    how: str, runs: int
) -> None:
    """Real processes that end the lock's transaction and exit at once: the
    release is not lost to the interpreter's shutdown (the watcher thread and
    the pool that releases stop then), and the lock is free at once, not after
    its ttl. A rollback just before the exit lost it in most runs."""
    env = {**os.environ, "DLOCK_TEST_DB_NAME": str(connection.settings_dict["NAME"])}
    for run in range(runs):
        resource = f"until:exit:{run}"
        script = "from tests.workers_until_commit import end_transaction_and_exit as end; "
        script += f"end({resource!r}, {how!r})"
        finished = subprocess.run(
            [sys.executable, "-c", script],
            cwd=Path(__file__).resolve().parent.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert finished.returncode == 0, finished.stderr
        assert "Could not release" not in finished.stderr, f"run {run}: {finished.stderr}"
        next_holder = Locks.acquire(resource, owner="next", ttl=30)
        assert next_holder is not None, f"run {run}: still held after the process exited"


@beside_transactions
def test_a_release_the_database_fails_after_a_rollback_stops_no_other_release(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The database fails the release after a rollback (a restart, found by the
    torture run): it is logged, the lock expires by its ttl, the thread may ask
    for it again, and the watcher goes on releasing the others' locks."""
    real_release = min_hold.release_or_keep
    failures: list[str] = []

    def fails_once(using: str, handle: Any, min_hold: Any) -> Any:
        if not failures:
            failures.append(handle.resource)
            raise OperationalError("the server restarted")
        return real_release(using, handle, min_hold)

    monkeypatch.setattr(context, "release_or_keep", fails_once)
    for resource in ("until:9", "until:10"):
        with transaction.atomic():
            with lock(resource, ttl=30, until="commit"):
                pass
            transaction.set_rollback(True)
        wait_for(lambda: bool(failures), 5, "the first release failed")
    wait_for(lambda: not Locks.active().filter(resource="until:10").exists(), 5, "until:10 freed")
    assert failures == ["until:9"]
    assert "Could not release the lock on 'until:9' after its transaction ended" in caplog.text
    assert Locks.active().filter(resource="until:9").exists()  # until its ttl
    with pytest.raises(LockNotAcquired, match="held by another owner"), lock("until:9"):
        pass  # refused as any holder's lock: this thread no longer holds it


def test_until_commit_is_refused_where_it_cannot_hold() -> None:
    if ON_SQLITE:
        with (
            pytest.raises(LockTransactionError, match="SQLite"),
            transaction.atomic(),
            lock("until:4", until="commit"),
        ):
            pass
        return
    with pytest.raises(LockTransactionError, match="none is open"), lock("until:4", until="commit"):
        pass
    with (
        transaction.atomic(),
        lock("until:4", until="commit"),
        pytest.raises(LockHeldByCaller),
        lock("until:4", until="commit"),
    ):
        pass
    # Without it, a lock inside atomic() is refused, as before.
    with (
        pytest.raises(LockTransactionError, match="inside a transaction"),
        transaction.atomic(),
        lock("until:5"),
    ):
        pass


@pytest.mark.parametrize(
    "arguments",
    [{"until": "rollback"}, {"reentrant": True}, {"min_hold": 5}],
    ids=["unknown", "reentrant", "min-hold"],
)
def test_until_commit_arguments_are_checked_first(arguments: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument):
        lock("until:6", **{"until": "commit", **arguments})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        lock(["until:6", "until:7"], until="commit")


@pytest.mark.asyncio
async def test_until_commit_is_sync_code() -> None:
    with pytest.raises(LockTransactionError, match="sync code"):
        async with lock("until:8", until="commit"):
            pass


@beside_transactions
def test_the_docs_example_holds_the_lock_to_the_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    shop = types.ModuleType("shop.models")
    shop.Product = Product  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shop", types.ModuleType("shop"))
    monkeypatch.setitem(sys.modules, "shop.models", shop)
    Product.objects.create(sku="mug", stock=1)
    seen: list[bool] = []
    restock = run_example(
        "until commit", log_restock=lambda sku, quantity: seen.append(held_by_another("stock:mug"))
    )["restock"]
    restock("mug", 2)
    assert seen == [True]  # after the block, before the commit
    assert Product.objects.get(sku="mug").stock == 3
    assert not Locks.active().filter(resource="stock:mug").exists()


@beside_transactions
def test_the_move_stock_recipe_never_oversells_nor_deadlocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Moves in both directions at once, one item each, from 3 mugs and no cups:
    each move sees the stock the last one committed (a move of a cup that is not
    there yet is refused, never a negative stock), and none deadlocks."""
    shop = types.ModuleType("shop.models")
    shop.Product = Product  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "shop", types.ModuleType("shop"))
    monkeypatch.setitem(sys.modules, "shop.models", shop)
    Product.objects.create(sku="mug", stock=3)
    Product.objects.create(sku="cup", stock=0)
    move_stock = run_example("move stock")["move_stock"]

    def moves(source: str, target: str) -> Callable[[dict[str, object]], list[bool]]:
        return lambda outcome: [move_stock(source, target, 1) for _ in range(8)]

    both = [run_in_thread(moves("mug", "cup")), run_in_thread(moves("cup", "mug"))]
    for outcome in both:
        outcome["thread"].join(60)
        assert "error" not in outcome, outcome["error"]
    stock = dict(Product.objects.values_list("sku", "stock"))
    assert stock["mug"] + stock["cup"] == 3
    moved = [sum(outcome["result"]) for outcome in both]
    assert stock["cup"] == moved[0] - moved[1]
