"""Where throttles keep their uses, and the decision of each use.

A key with the rate N per period has at most N rows in
``distributed_lock_throttle_slots`` (``ThrottleSlot``), one per use within the
last period. A use, in a lock transaction of its own (``in_lock_transaction``):

1. locks the key's slot 0 (``SELECT ... FOR UPDATE``; SQLite's lock
   transaction holds the database's write lock instead), inserting it first
   when the key has no row yet; every use of the key waits here, so uses of
   one key are decided one at a time;
2. reads every row of the key and the database's now, in a statement that
   starts after that lock was granted (so it sees the last use's row, and its
   now is later than that use's);
3. refuses when N rows were used within the period (after ``now - period``),
   or writes now into a row used a period ago or more (or into a new row).

Every use within the last period keeps its row (only a row used a period ago
or more is written again), so the count in step 3 is exact, and no window of
one period ever holds more than N granted uses. Nothing here formats SQL: the
ORM writes the statements for every database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet

from django_dlock.models import ThrottleSlot
from django_dlock.rules.clock import DatabaseNow
from django_dlock.service import service_for
from django_dlock.signals import throttle_used
from django_dlock.throttles.rate import Rate

__all__ = ["ThrottleDecision", "decide"]

# How many times a use inserts its key's slot 0 and finds it gone again (a
# purge deleted the key in between) before it gives up: never, in practice.
_LOCK_ATTEMPTS = 10


@dataclass(frozen=True)
class ThrottleDecision:
    """What a throttle decided for one use of ``key``; true when granted.

    ``at`` is the database's time of the decision (a granted use's time).
    ``retry_after`` is zero when granted; when refused, the time from ``at``
    until the oldest use in the window leaves it. ``remaining`` is how many
    more uses the window has room for now.
    """

    key: str
    rate: Rate
    granted: bool
    at: datetime
    retry_after: timedelta
    remaining: int

    def __bool__(self) -> bool:
        return self.granted


@dataclass(frozen=True)
class _Row:
    pk: int
    slot: int
    used_at: datetime | None


def decide(key: str, rate: Rate, using: str) -> ThrottleDecision:
    """Grant a use of ``key`` under ``rate`` (recording it) or refuse it, in a
    lock transaction of its own on ``using``. Raises ``LockTransactionError``
    inside a transaction the caller has open; a database failure raises.
    Sends ``throttle_used`` once the decision is committed."""
    decision = service_for(using).in_transaction(lambda: _decide(key, rate, using))
    throttle_used.send(
        sender=ThrottleSlot,
        key=key,
        rate=rate,
        granted=decision.granted,
        retry_after=decision.retry_after,
    )
    return decision


def _decide(key: str, rate: Rate, using: str) -> ThrottleDecision:
    slots = ThrottleSlot.objects.using(using)
    _lock_key(slots, key)
    rows, now = _read(slots, key)
    window_start = now - rate.period
    in_window = sorted(
        row.used_at for row in rows if row.used_at is not None and row.used_at > window_start
    )
    if len(in_window) >= rate.limit:
        # The window has room again once all but limit - 1 of its uses left it.
        frees_at = in_window[len(in_window) - rate.limit] + rate.period
        return ThrottleDecision(key, rate, False, now, frees_at - now, 0)
    free = [row for row in rows if row.used_at is None or row.used_at <= window_start]
    reusable = [row for row in free if row.slot < rate.limit]
    if reusable:
        oldest = min(reusable, key=lambda row: (row.used_at is not None, row.used_at, row.slot))
        slots.filter(pk=oldest.pk).update(used_at=now, free_at=now + rate.period, rate=str(rate))
    else:
        # Every row below the limit is in the window, and they are fewer than
        # the limit: a slot number below it is unused.
        taken = {row.slot for row in rows}
        slot = next(number for number in range(rate.limit) if number not in taken)
        slots.create(key=key, slot=slot, used_at=now, free_at=now + rate.period, rate=str(rate))
    # Rows past the limit (the rate was lowered) go once out of the window.
    beyond = [row.pk for row in free if row.slot >= rate.limit]
    if beyond:
        slots.filter(pk__in=beyond).delete()
    return ThrottleDecision(key, rate, True, now, timedelta(0), rate.limit - len(in_window) - 1)


def _lock_key(slots: QuerySet[ThrottleSlot], key: str) -> None:
    """Lock the key's slot 0 until the transaction ends, inserting it first
    when the key has none: ``ON CONFLICT DO NOTHING`` (``INSERT IGNORE`` on
    MariaDB, ``INSERT OR IGNORE`` on SQLite) waits for a concurrent first use
    of the key and then leaves its row, which the next look locks."""
    for _ in range(_LOCK_ATTEMPTS):
        if slots.select_for_update().filter(key=key, slot=0).values_list("pk", flat=True):
            return
        slots.bulk_create([ThrottleSlot(key=key, slot=0)], ignore_conflicts=True)
    raise RuntimeError(f"The throttle key {key!r} kept vanishing while its use was decided.")


def _read(slots: QuerySet[ThrottleSlot], key: str) -> tuple[list[_Row], datetime]:
    """Every row of ``key`` and the database's now, in one statement."""
    found = list(
        slots.filter(key=key)
        .annotate(now=DatabaseNow())
        .values_list("pk", "slot", "used_at", "now")
    )
    # Slot 0 is locked by this transaction: the statement returns it at least.
    # (SQLite may read its clock once a row: the latest is the statement's end.)
    now = max(row[3] for row in found)
    return [_Row(pk, slot, used_at) for pk, slot, used_at, _ in found], now
