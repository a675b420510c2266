"""Times and kinds of locks as people read them, in the admin and in
``manage.py dlock``: one rounded-down unit a person reads.

Outside ``django_dlock.admin``, whose import registers the admin: ``dlock`` runs
in projects without ``django.contrib.admin`` (cron, leader election)."""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext

from django_dlock.rules.clock import time_left

# ``rules.SHARED``: ``exceptions`` words its messages here, and ``rules``
# imports ``exceptions`` (through ``validators``), so this module does not.
SHARED = "shared"

ACTIVE = "active"
# Expired or force-released while its holder's lock-delay runs: refused to
# everyone until ``DistributedLock.available_at``.
DELAYED = "delayed"
EXPIRED = "expired"
RELEASED = "released"


def duration_in_words(seconds: float) -> str:
    """``seconds`` (>= 0) as one rounded-down unit a person reads: "42 s", "3 min", "5 h", "2 d"."""
    whole = int(seconds)
    if whole < 60:
        return gettext("%(count)d s") % {"count": whole}
    if whole < 60 * 60:
        return gettext("%(count)d min") % {"count": whole // 60}
    if whole < 48 * 60 * 60:
        return gettext("%(count)d h") % {"count": whole // (60 * 60)}
    return gettext("%(count)d d") % {"count": whole // (24 * 60 * 60)}


def time_left_in_words(
    status: str, expires_at: datetime, now: datetime, available_at: datetime | None = None
) -> str:
    """ "in 42 s", "expired 3 min ago" or "released 5 s ago", from the database time
    ``now``; "delayed, available in 28 s" while a lock-delay runs until ``available_at``."""
    if status == DELAYED and available_at is not None:
        until = duration_in_words(max(time_left(available_at, now), 0))
        return gettext("delayed, available in %(time)s") % {"time": until}
    left = time_left(expires_at, now)
    if status == ACTIVE:
        return gettext("in %(time)s") % {"time": duration_in_words(max(left, 0))}
    if -left < 1:  # also when the lock expired between ``now`` and the list's query
        return gettext("released just now") if status == RELEASED else gettext("expired just now")
    if status == RELEASED:
        return gettext("released %(time)s ago") % {"time": duration_in_words(-left)}
    return gettext("expired %(time)s ago") % {"time": duration_in_words(-left)}


def kind_in_words(mode: str, limit: int | None, hold_count: int = 1) -> str:
    """What a hold or a waiter is: "exclusive", "exclusive, held 3 times"
    (reentrant), "shared" (a reader) or "semaphore of 4" (a permit)."""
    if limit is not None:
        return gettext("semaphore of %(limit)d") % {"limit": limit}
    if mode == SHARED:
        return gettext("shared")
    if hold_count > 1:
        return gettext("exclusive, held %(count)d times") % {"count": hold_count}
    return gettext("exclusive")
