"""Worker functions run in separate OS processes by tests/test_until_commit.py."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from tests.utils import setup_worker


def increment_in_transactions(
    db: dict[str, Any], resource: str, iterations: int, start: Any
) -> list[int]:
    """``iterations`` times, in a transaction: take ``lock(resource,
    until="commit")``, read the counter, write it + 1, and work on after the
    lock's block before the commit (where a lock released at the block's exit
    would let the next process read the old value). The fencing tokens."""
    setup_worker(db)
    from django.db import transaction

    from django_dlock import lock
    from tests.testapp.models import Counter

    start.wait()
    tokens = []
    for _ in range(iterations):
        with transaction.atomic():
            with lock(resource, ttl=30, timeout=60, until="commit") as held:
                counter = Counter.objects.get(name=resource)
                Counter.objects.filter(pk=counter.pk).update(value=counter.value + 1)
                tokens.append(held.fencing_token)
            time.sleep(0.01)  # the rest of the transaction
    return tokens


def end_transaction_and_exit(resource: str, how: str) -> None:
    """A process's last work, run as ``python -c``: take ``lock(resource,
    until="commit")`` in a transaction and end it as ``how`` says, then exit.
    "rollback": the main thread rolls back and the process exits at once;
    "rollback in a thread", "commit in a thread": a thread (not a daemon) ends
    its transaction once the main thread has returned and the interpreter's
    shutdown has begun (thread pools refuse new work then)."""
    setup_worker({"NAME": os.environ["DLOCK_TEST_DB_NAME"]})
    from django.db import transaction

    from django_dlock import lock

    def end_transaction(after: threading.Event | None) -> None:
        with transaction.atomic():
            with lock(resource, ttl=30, until="commit"):
                pass
            if after is not None:
                after.set()
                while threading.main_thread().is_alive():
                    time.sleep(0.01)
                time.sleep(0.2)  # the shutdown's first steps (the pools') run meanwhile
            if how != "commit in a thread":
                transaction.set_rollback(True)

    if how == "rollback":
        end_transaction(None)
        return
    held = threading.Event()
    threading.Thread(target=end_transaction, args=(held,)).start()
    held.wait(30)
