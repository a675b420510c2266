"""A hand-over's grant that its head may not have started on yet, and what an
operator's release of it leaves (issue 46: the told grant).

A release that hands the lock to the head of the queue tells the head so in
its wake-up (``rules.notice``), and the head starts its work on that alone, as
late as it reads the wake-up (``locking.told``): a paused head reads it when it
resumes. So a grant must not come free to someone else before its head could
have started on it, or the head would begin its section after the next
holder's, beside it. The head starts only while three quarters of the offer
lease (``OFFER_LEASE``) are left by its own conservative count from before the
grant; so a grant kept from any other taker until ``OFFER_LEASE`` after it was
written (``OFFER_END``) was always started on first, if at all.

An expired grant already is: it lasts ``OFFER_LEASE`` at most until the head
extends it. The other ways a grant ends before its head confirmed it are an
operator's (``force_release``) and ``release_all``: those **revoke** a grant
still ``UNCONFIRMED``: the row is released (no owner, so the head's extension
and ``held.atomic()``'s check fail, and the head learns of the loss as any
revoked holder does) but expires at ``OFFER_END`` with a lock-delay of zero
(``GRANT_MARK``), so the lock-delay rule (``predicates.DELAY_RUNS``) keeps
everyone out until then: no second copy of the rule. A purge deletes only
rows past their delay (``backends.purge.purgeable_q``).

The grant is marked by its lock-delay: a hand-over writes ``GRANT_MARK`` (a
zero duration, which no claim writes: a claim's zero lock-delay is none,
``rules.claim``), where it used to write none. A zero delay is no delay: once
the row expires or its holder releases it (which clears the delay), nothing
runs. A grant stays "unconfirmed" for ``OFFER_LEASE`` from its start
(``acquired_at``) whether or not the head extended it meanwhile, which only
delays an operator's release of a hold younger than a second by the rest of
that second; a head that took the offer itself (``Offers.take``) wrote its own
lock-delay over the mark, and is released at once as any holder.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django_dlock.rules.predicates import (
    HELD,
    LOCK_DELAY,
    NOW,
    All,
    Column,
    Compare,
    Param,
    Plus,
    SqlRow,
)

__all__ = ["GRANT_MARK", "GRANT_PARAMS", "OFFER_END", "OFFER_LEASE", "UNCONFIRMED", "revoked"]

#: Seconds a hand-over offers the lock for (the head's ttl where shorter): the
#: head starts on the grant its wake-up tells (``locking.told``) and its renewer
#: extends it to its ttl, or, told too late, it takes the offer for its ttl
#: (``LockBackend.granted``). So a head that stopped answering (a paused
#: process) holds the lock up for this long, not for its ttl.
OFFER_LEASE = 1.0

#: The lock-delay a hand-over's grant writes: none, and the mark of a grant.
GRANT_MARK = timedelta(0)

#: The parameters of ``UNCONFIRMED`` and ``OFFER_END``.
GRANT_PARAMS: Mapping[str, Any] = {
    "offer_lease": timedelta(seconds=OFFER_LEASE),
    "grant_mark": GRANT_MARK,
}

#: Until when nobody may take a revoked grant: the offer lease from its start.
OFFER_END = Plus(Column("acquired_at"), Param("offer_lease"))

#: Held under a hand-over's grant younger than the offer lease.
UNCONFIRMED = All(
    (HELD, Compare(LOCK_DELAY, "=", Param("grant_mark")), Compare(OFFER_END, ">", NOW))
)


def revoked(row: Any) -> datetime | None:
    """The expiry an operator's release writes on ``row`` (a ``LockRow``)
    held under an ``UNCONFIRMED`` grant: its ``OFFER_END``; None for any
    other row (released at once)."""
    if not UNCONFIRMED.value(row, GRANT_PARAMS):
        return None
    end: datetime = OFFER_END.value(row, GRANT_PARAMS)
    return end


def revoked_sql(row: SqlRow) -> str:
    """SQL: the expiry an operator's release writes on ``row``: ``OFFER_END``
    under an ``UNCONFIRMED`` grant, else the database's now (parameters:
    ``GRANT_PARAMS``)."""
    return f"CASE WHEN {UNCONFIRMED.sql(row)} THEN {OFFER_END.sql(row)} ELSE {row.now} END"
