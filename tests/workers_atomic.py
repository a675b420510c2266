"""Worker functions run in separate OS processes by tests/test_atomic_processes.py."""

from __future__ import annotations

import os
import random
import time
from typing import Any

from tests.utils import setup_worker


def write_in_a_guarded_block(
    db: dict[str, Any],
    resource: str,
    ttl: float,
    work: float,
    in_block: Any,
    outcome: Any,
    linger: float = 0,
) -> None:
    """Hold ``resource`` (owner "holder", ``ttl`` seconds) and, in
    ``held.atomic()``, write ``<resource>:before``, tell ``in_block``, work for
    ``work`` seconds (the test may stop the process meanwhile), write
    ``<resource>:after``, keep the lock ``linger`` seconds more. Puts on
    ``outcome`` "committed", or the name of the error that ended the block."""
    setup_worker(db)
    from django_dlock import lock
    from tests.testapp.models import Counter

    result = "committed"
    try:
        with lock(resource, owner="holder", ttl=ttl) as held:
            try:
                with held.atomic():
                    Counter.objects.create(name=f"{resource}:before")
                    in_block.set()
                    time.sleep(work)
                    Counter.objects.create(name=f"{resource}:after")
                time.sleep(linger)
            except Exception as error:
                result = type(error).__name__
    except Exception:  # noqa: S110 - the release of a lost lock: reported above
        pass
    outcome.put(result)


def sell(db: dict[str, Any], sku: str, seed: int, start: Any, guarded: bool = True) -> None:
    """Sell ``sku`` one unit at a time until none is left: under the lock
    ``stock:<sku>`` (ttl 1 s), in ``held.atomic()``, read the stock, work a
    little (where the test stops or kills the process), write the stock read
    minus one (an absolute value: a late write would undo another's sale) and
    record the sale (a ``Counter`` named ``sale:...``). A lost lock or a
    connection that the database closed ends one try, not the worker.
    ``guarded=False``: ``transaction.atomic()`` instead, to show that the test
    tells."""
    setup_worker(db)
    from django.db import DatabaseError, connection, transaction

    from django_dlock import LockNotAcquired, lock
    from django_dlock.exceptions import LockLost
    from tests.testapp.models import Counter, Product

    rng = random.Random(seed)
    start.wait()
    while True:
        try:
            # The label tells the test which process holds the lock.
            with lock(f"stock:{sku}", ttl=1, timeout=30, label=str(os.getpid())) as held:
                block = held.atomic() if guarded else transaction.atomic()
                with block:
                    product = Product.objects.get(sku=sku)
                    if product.stock == 0:
                        return
                    time.sleep(rng.uniform(0.01, 0.03))
                    Product.objects.filter(pk=product.pk).update(stock=product.stock - 1)
                    Counter.objects.create(
                        name=f"sale:{sku}:{seed}:{time.monotonic_ns()}", value=held.fencing_token
                    )
        except (LockLost, LockNotAcquired, DatabaseError):
            connection.close()  # a session the server ended is not used again
