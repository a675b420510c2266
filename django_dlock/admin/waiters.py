"""The queue of ``lock()`` waiters as the admin shows it: how many wait for
each listed lock, and each lock's queue on its page.

Only live waiters count: a waiter whose ticket expired (its process died
without leaving the queue) is skipped by the queue itself, so it is not shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Expression, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_lazy

from django_dlock.backends.clock import DatabaseNow
from django_dlock.humanize import (
    ACTIVE,
    duration_in_words,
    kind_in_words,
    time_left_in_words,
)
from django_dlock.models import LockWaiter

# A lock's page lists at most this many waiters, and says how many more wait.
SHOWN_WAITERS = 100


def live_waiters(using: str) -> QuerySet[LockWaiter]:
    """The queued waiters whose tickets are live by the database's clock."""
    return LockWaiter.objects.using(using).filter(expires_at__gt=DatabaseNow())


def waiter_count(using: str) -> Expression:
    """How many live waiters queue for each row's resource: a subquery of the
    list's query, so the list costs the same queries for any number of rows."""
    counts = (
        live_waiters(using)
        .filter(resource=OuterRef("resource"))
        .order_by()
        .values("resource")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return Coalesce(Subquery(counts, output_field=IntegerField()), 0)


@dataclass(frozen=True)
class QueuedWaiter:
    """A waiter at its place in the queue (1 is the head)."""

    position: int
    waiter: LockWaiter
    now: datetime  # the database's time of the page


@dataclass(frozen=True)
class WaiterColumn:
    """A column of the queue's table. A column that shows owners is left out for
    users who may not see owners (``django_dlock.permissions``)."""

    header: str | Promise
    cell: Callable[[QueuedWaiter], str]
    shows_owner: bool = False


def _ttl(waiter: QueuedWaiter) -> str:
    ttl: timedelta | None = waiter.waiter.ttl
    # Processes that predate the column took the lock for their own ttl.
    return "—" if ttl is None else duration_in_words(ttl.total_seconds())


def _wake_up(waiter: QueuedWaiter) -> str:
    return gettext("told by the release") if waiter.waiter.channel else gettext("polls")


def _ticket(waiter: QueuedWaiter) -> str:
    # Its process renews the ticket while it waits; one that stops being
    # renewed (a crashed waiter) drops out of the queue when it expires.
    return time_left_in_words(ACTIVE, waiter.waiter.expires_at, waiter.now)


# The table on a lock's page (the model keeps no time of queuing yet).
COLUMNS = [
    WaiterColumn(gettext_lazy("position"), lambda waiter: str(waiter.position)),
    WaiterColumn(gettext_lazy("label"), lambda waiter: waiter.waiter.label or "—"),
    WaiterColumn(gettext_lazy("owner"), lambda waiter: waiter.waiter.owner, shows_owner=True),
    WaiterColumn(
        gettext_lazy("asks for"),
        lambda waiter: kind_in_words(waiter.waiter.mode, waiter.waiter.limit),
    ),
    WaiterColumn(gettext_lazy("will hold it for"), _ttl),
    WaiterColumn(gettext_lazy("woken"), _wake_up),
    WaiterColumn(gettext_lazy("ticket expires"), _ticket),
]


@dataclass(frozen=True)
class WaiterTable:
    """What a lock's page shows of its queue."""

    headers: list[str]
    rows: list[list[str]]
    more: int  # live waiters queued behind the rows shown


def waiter_table(
    resource: str,
    now: datetime,
    *,
    using: str,
    show_owners: bool,
    columns: Sequence[WaiterColumn] = COLUMNS,
) -> WaiterTable:
    """The live waiters of ``resource`` in queue order, the first ``SHOWN_WAITERS``."""
    shown = [c for c in columns if show_owners or not c.shows_owner]
    queue = live_waiters(using).filter(resource=resource).order_by("id")
    waiters = list(queue[: SHOWN_WAITERS + 1])
    more = queue.count() - SHOWN_WAITERS if len(waiters) > SHOWN_WAITERS else 0
    rows = [
        [column.cell(QueuedWaiter(position, waiter, now)) for column in shown]
        for position, waiter in enumerate(waiters[:SHOWN_WAITERS], start=1)
    ]
    return WaiterTable(headers=[str(c.header) for c in shown], rows=rows, more=more)
