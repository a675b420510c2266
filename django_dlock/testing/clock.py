"""Moving the lock tables' clock forward: every stored time of the locks,
their shared holds and the throttles' uses is shifted back by the same amount,
which to every later statement (they all compare with the database's now)
looks the same as that much time having passed.

Shifting the rows needs no change to the lock operations' SQL and costs them
nothing; an offset in the database's clock (``rules/clock.py``) would be read
by every statement of every vendor, in production too. What it does not move:
the database's now itself (so rows of your own models, ``run_after`` of
queued tasks), a handle's own view of its lease (``LockHandle.expires_at``,
the renewal thread's schedule), waiters' tickets (a live waiter refreshes its
own), ``time.monotonic()`` and sleeps. See docs/testing.md.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import models, transaction

from django_dlock.conf import conf
from django_dlock.models import DistributedLock, LockHold, ThrottleSlot
from django_dlock.rules.throttle import shifted

#: The tables and the columns of time the kit shifts.
SHIFTED: tuple[tuple[type[models.Model], tuple[str, ...]], ...] = (
    (DistributedLock, ("acquired_at", "expires_at")),
    (LockHold, ("acquired_at", "expires_at")),
    (ThrottleSlot, ("used_at", "free_at", "refused_at")),
)


def advance_lock_clock(seconds: float | timedelta, *, using: str | None = None) -> int:
    """Make ``seconds`` pass for the lock tables of ``using`` (default
    ``DLOCK_DATABASE``): locks expire, lock-delays end, throttle and
    ``once_per`` windows close as if that much time had gone by. Returns how
    many rows it moved. Runs in the caller's transaction when one is open
    (Django's ``TestCase``), else in one of its own."""
    delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
    if delta < timedelta(0):
        raise ValueError(f"The lock clock only moves forward, not by {delta}.")
    alias = using or conf.DATABASE
    moved = 0
    with transaction.atomic(using=alias):
        for model, columns in SHIFTED:
            # Read and written back by the ORM rather than by "column - interval"
            # in SQL: each vendor's datetime arithmetic and SQLite's text format
            # are then Django's concern. The tables of a test are small.
            rows = list(
                model._default_manager.using(alias)
                .select_for_update()
                .only(*columns, *(("ring",) if model is ThrottleSlot else ()))
            )
            for row in rows:
                for column in columns:
                    value = getattr(row, column)
                    if value is not None:
                        setattr(row, column, value - delta)
            written = list(columns)
            if model is ThrottleSlot:
                # A throttle's window is the times its ring keeps (rules.throttle).
                by_us = delta // timedelta(microseconds=1)
                for row in rows:
                    row.ring = shifted(row.ring, by_us)  # type: ignore[attr-defined]
                written.append("ring")
            model._default_manager.using(alias).bulk_update(rows, written, batch_size=500)
            moved += len(rows)
    return moved
