"""Worker functions run in separate OS processes by tests/test_until_commit.py."""

from __future__ import annotations

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
