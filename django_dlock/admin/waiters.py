"""The queue of ``lock()`` waiters as the admin shows it: how many wait for
each listed lock, and each lock's queue on its page.

Only live waiters count: a waiter whose ticket expired (its process died
without leaving the queue) is skipped by the queue itself, so it is not shown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Expression, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_lazy

from django_dlock.humanize import (
    ACTIVE,
    duration_in_words,
    kind_in_words,
    time_left_in_words,
)
from django_dlock.locking.deadlock import (
    cycles_through,
    holding_of,
    valid_holds,
    waiters_holding,
)
from django_dlock.models import LockWaiter
from django_dlock.waitfor import deadlock_in_words, waiting_holders

# A lock's page lists at most this many waiters, and says how many more wait.
SHOWN_WAITERS = 100


def waiter_count(using: str) -> Expression:
    """How many live waiters queue for each row's resource: a subquery of the
    list's query, so the list costs the same queries for any number of rows."""
    counts = (
        LockWaiter.objects.using(using)
        .live()
        .filter(resource=OuterRef("resource"))
        .order_by()
        .values("resource")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return Coalesce(Subquery(counts, output_field=IntegerField()), 0)


@dataclass(frozen=True)
class WaitFor:
    """Who waits for whom around a lock's queue, read once for its page."""

    valid: frozenset[tuple[str, str]] = frozenset()  # the waiters' claimed holds valid now
    behind: str = ""  # the holders of the resource that wait themselves, in words


@dataclass(frozen=True)
class QueuedWaiter:
    """A waiter at its place in the queue (1 is the head)."""

    position: int
    waiter: LockWaiter
    now: datetime  # the database's time of the page
    wait_for: WaitFor = field(default_factory=WaitFor)


@dataclass(frozen=True)
class WaiterColumn:
    """A column of the queue's table. A column that shows owners is left out for
    users who may not see owners (``django_dlock.permissions``)."""

    header: str | Promise
    cell: Callable[[QueuedWaiter], str]
    shows_owner: bool = False
    # Shown only where a waiter holds other locks or a holder waits itself.
    only_with_wait_for: bool = False


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


def _holds(waiter: QueuedWaiter) -> str:
    # Resources only: the owners in ``holding`` are secrets.
    held = [
        resource
        if (resource, owner) in waiter.wait_for.valid
        else gettext("%s (not held now)") % resource
        for resource, owner in holding_of(waiter.waiter.holding)
    ]
    return ", ".join(held) or "—"


def _waits_behind(waiter: QueuedWaiter) -> str:
    return waiter.wait_for.behind or "—"


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
    WaiterColumn(gettext_lazy("holds"), _holds, only_with_wait_for=True),
    WaiterColumn(gettext_lazy("waits behind"), _waits_behind, only_with_wait_for=True),
]


@dataclass(frozen=True)
class WaiterTable:
    """What a lock's page shows of its queue."""

    headers: list[str]
    rows: list[list[str]]
    more: int  # live waiters queued behind the rows shown
    # Cycles of waiters through this queue, each in words (``lock()`` breaks
    # them within a moment: one shown here is on its way out).
    deadlocks: list[str] = field(default_factory=list)


def waiter_table(
    resource: str,
    now: datetime,
    *,
    using: str,
    show_owners: bool,
    columns: Sequence[WaiterColumn] = COLUMNS,
) -> WaiterTable:
    """The live waiters of ``resource`` in queue order, the first ``SHOWN_WAITERS``;
    what each holds and whom it waits behind when that is anything (the
    columns ``only_with_wait_for``), and the deadlocks through the queue."""
    queue = LockWaiter.objects.using(using).live().filter(resource=resource).order_by("id")
    waiters = list(queue[: SHOWN_WAITERS + 1])
    more = queue.count() - SHOWN_WAITERS if len(waiters) > SHOWN_WAITERS else 0
    waiters = waiters[:SHOWN_WAITERS]
    wait_for, deadlocks = _wait_for(resource, waiters, using=using)
    graphing = wait_for is not None
    shown = [
        c
        for c in columns
        if (show_owners or not c.shows_owner) and (graphing or not c.only_with_wait_for)
    ]
    rows = [
        [
            column.cell(QueuedWaiter(position, waiter, now, wait_for or WaitFor()))
            for column in shown
        ]
        for position, waiter in enumerate(waiters, start=1)
    ]
    return WaiterTable(
        headers=[str(c.header) for c in shown], rows=rows, more=more, deadlocks=deadlocks
    )


def _wait_for(
    resource: str, waiters: Sequence[LockWaiter], *, using: str
) -> tuple[WaitFor | None, list[str]]:
    """What the queue's ``only_with_wait_for`` columns show (None: nothing, no waiter
    holds other locks and no holder waits), and its deadlocks in words."""
    holding = waiters_holding(using)
    if not waiters or not holding:  # nobody waits while holding: no edges at all
        return None, []
    holders = waiting_holders(resource, using=using, holding=holding)
    claims = [pair for waiter in waiters for pair in holding_of(waiter.holding)]
    if not claims and not any(holder.waiting_for for holder in holders):
        return None, []
    behind = ", ".join(
        gettext("%(holder)s (waiting for %(resource)s)")
        % {"holder": holder.name(), "resource": holder.waiting_for}
        for holder in holders
        if holder.waiting_for
    )
    tickets = [waiter.pk for waiter in waiters]
    tickets += [holder.ticket for holder in holders if holder.ticket is not None]
    cycles = cycles_through(using, holding, tickets)
    return (
        WaitFor(valid=frozenset(valid_holds(using, claims)), behind=behind),
        [deadlock_in_words(cycle) for cycle in cycles],
    )
