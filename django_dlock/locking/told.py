"""A head that starts on its wake-up alone: the release granted it the lock and
said so in the wake-up (``rules.notice``), so the head builds its hold from
what it was told, with no statement of its own (issue 46: a turn in one
commit, with no round trip after the release).

What it was granted is the short offer lease (``OFFER_LEASE``), not its
ttl: a head that is not there to hear it (paused, dead) holds the others up
for that long only. The head counts the lease conservatively on its own
monotonic clock: its last look read the database's now ``N``, after the
moment ``t`` it was sent; the grant was written at the database's ``G``, so
at ``t + (G - N)`` or later. Not from when the wake-up arrived: a process
paused after the grant reads its wake-up as late as it resumes, and must find
the lease as old as it is. The lock's renewer extends it
to the ttl in the background before a quarter of the lease has passed
(``locking.renewer``): a hold released sooner (a short turn) never sends it.
A head that was told too late to trust the lease for long (less than three
quarters of it left by its own count: it last looked long before) takes the
offer for its ttl in one round trip, as before (``Wait._granted``); so does a
claim with a lock-delay, which the release did not write.

Readers and permits are told their shared holds the same way: the release
that frees room grants the head of the queue and those that fit beside it a
hold each for the offer lease (``backends.shared_grants``, SQLite), and each
starts on its notice alone; one told too late extends its hold to its ttl
(``LockService.accept_shared_grant``) before it starts.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Protocol

from django_dlock.listeners.base import Watch
from django_dlock.rules import Hold
from django_dlock.rules.claim import Claim
from django_dlock.service import service_for

# What an acquisition gives ``lock()``: the hold, the monotonic time before it
# was asked for, and the lease it was granted where shorter than its ttl.
Lease = float | None
Taken = tuple[Hold, float, Lease]

# SQLite's now has whole milliseconds: a look's may be that much early.
CLOCK_SLACK = 0.001
# Take a told grant only while at least this share of its lease is left.
LEASE_LEFT = 0.75


class Waiting(Protocol):
    """What ``told_grant`` reads and sets of a wait (``locking.waiting.Wait``)."""

    claim: Claim
    using: str
    watch: Watch | None
    ticket: int | None
    clock: tuple[float, datetime] | None
    started: float
    lease: float | None
    told_late: bool
    told: tuple[int, int] | None


def told_grant(wait: Waiting) -> Hold | None:
    """The hold the wake-up that named ``wait``'s ticket carried, its lease
    counted from its last look (``Wait.clock``); None where it carried none,
    or where the waiter must take the offer itself."""
    claim, watch, ticket, clock = wait.claim, wait.watch, wait.ticket, wait.clock
    if watch is None or ticket is None or clock is None:
        return None
    notice = watch.take_notice(ticket)
    if notice is None:
        return None
    wait.told = (ticket, notice.fencing_token)  # which hold it is, should it take it later
    wait.told_late = True  # unless it starts now: it takes the grant itself (``Wait._granted``)
    if claim.lock_delay is not None:
        return None
    sent, looked_at = clock
    since = sent + (notice.acquired_at - looked_at).total_seconds() - CLOCK_SLACK
    lease = notice.lease
    if since + lease - time.monotonic() < lease * LEASE_LEFT:
        return None
    wait.told_late = False
    wait.ticket = None  # the release dropped it
    wait.started = since
    duration = claim.duration.total_seconds() if claim.duration is not None else 0.0
    wait.lease = lease if lease < duration else None  # else the grant is its whole ttl
    return service_for(wait.using).told_grant(claim, notice)


def take_shared_grant(wait: Waiting, ticket: int) -> Hold | None:
    """The shared hold a release granted ``wait``'s reader or permit
    (``backends.shared_grants``) on ``ticket``, now for its ttl, where it was
    told too late to start on it, or its wake-up went astray (``told_late``);
    else None. The hold of the token its wake-up told, where one did: never
    another hold its owner has (an explicit owner's, say, taken since)."""
    told, wait.told_late = wait.told_late, False
    claim = wait.claim
    if not told or claim.duration is None:
        return None
    if (wait.told is None or wait.told[0] != ticket) and wait.watch is not None:
        notice = wait.watch.take_notice(ticket)  # told since its last step
        wait.told = None if notice is None else (ticket, notice.fencing_token)
    token = wait.told[1] if wait.told is not None and wait.told[0] == ticket else None
    service, duration = service_for(wait.using), claim.duration
    return service.accept_handover(
        claim.resource, claim.owner, ticket, duration, instance=False, shared=True, token=token
    )
