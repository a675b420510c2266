"""Deleting throttle keys whose uses have all left their window (``purge_locks``).

A key whose row is free (``free_at`` passed: its last use is a period old or
more) holds nothing a later use would count, so it can go whole; its next use
starts it again. Each batch runs in a lock transaction of its own: it locks
the chosen keys' rows, in key order, then checks again that nothing was used
meanwhile, and deletes. A use of a chosen key waits for that lock, and then
finds its row gone and inserts it again.
"""

from __future__ import annotations

from django.db.models import Exists, OuterRef, QuerySet

from django_dlock.models import ThrottleSlot
from django_dlock.prefix import resource_prefix_q
from django_dlock.rules.clock import expired_before
from django_dlock.service import service_for

__all__ = ["count_free_keys", "purge_free_keys"]


def count_free_keys(using: str, *, older_than: float = 0, prefix: str = "") -> int:
    """How many keys ``purge_free_keys`` would delete now."""
    return _free_keys(using, older_than, prefix).count()


def purge_free_keys(
    using: str, *, older_than: float = 0, batch_size: int = 10_000, prefix: str = ""
) -> int:
    """Delete every key (starting with ``prefix``) whose uses all left their
    window at least ``older_than`` seconds ago, in batches of at most
    ``batch_size`` keys; return how many keys."""
    deleted = 0
    while True:
        chosen, gone = service_for(using).in_transaction(
            lambda: _purge_batch(using, older_than, batch_size, prefix)
        )
        deleted += gone
        # Done when the batch took every free key there was, or deleted none of
        # those it chose (each was used meanwhile: choosing again would find
        # the same keys).
        if chosen < batch_size or not gone:
            return deleted


def _purge_batch(using: str, older_than: float, batch_size: int, prefix: str) -> tuple[int, int]:
    """(keys chosen, keys deleted) of one batch, in its lock transaction."""
    slots = ThrottleSlot.objects.using(using)
    chosen = list(
        _free_keys(using, older_than, prefix)
        .select_for_update()
        .order_by("key")
        .values_list("key", flat=True)[:batch_size]
    )
    if not chosen:
        return 0, 0
    # The statement above chose on the rows as they were before it waited for
    # the locks: a use committed meanwhile is seen by this one.
    used = set(
        slots.filter(key__in=chosen, free_at__gt=expired_before(older_than)).values_list(
            "key", flat=True
        )
    )
    free = [key for key in chosen if key not in used]
    if free:
        slots.filter(key__in=free).delete()
    return len(chosen), len(free)


def _free_keys(using: str, older_than: float, prefix: str) -> QuerySet[ThrottleSlot]:
    """The slot 0 of each key (starting with ``prefix``) whose every row is free
    since ``older_than`` seconds ago or never used."""
    slots = ThrottleSlot.objects.using(using)
    in_use = slots.filter(key=OuterRef("key"), free_at__gt=expired_before(older_than))
    keys = slots.filter(slot=0).exclude(Exists(in_use))
    return keys.filter(resource_prefix_q(prefix, "key")) if prefix else keys
