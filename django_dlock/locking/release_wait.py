"""The waiter waiting for a release inside the database, where no listener
wakes it and the database can tell (MariaDB: gates, ``backends.mysql.wake``):
the sync ``lock()`` sleeps there rather than on its ``Wakeup``, and looks once
it passed. The head waits at the holder's gate; a waiter behind it at the gate
of the waiter just ahead (the chain), which that waiter holds while it waits
and keeps as the holder's gate once it takes the lock: so the release that
follows finds its next waiter already at the gate. An async waiter sleeps on
its event loop, which a blocked connection would hold up: it polls."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django_dlock.conf import conf

if TYPE_CHECKING:
    from django_dlock.locking.queue import Queue, QueueState
    from django_dlock.locking.wakeup import Wakeup
    from django_dlock.rules.claim import Claim


@dataclass
class Chain:
    """A waiter's place in the chain of gates."""

    ahead: str | None = None  # the waiter ahead whose gate it waits at next (its owner)
    missed: str | None = None  # a waiter ahead whose gate was not held: look once first
    gated: bool = False  # it held its own gate at a wait: given up if it leaves without


class Wait(Protocol):
    """What of ``waiting.Wait`` this module reads and sets."""

    queue: Queue
    wakeup: Wakeup
    claim: Claim
    ticket: int | None
    cancelled: bool
    acquired: bool
    release_of: str | None
    unannounced: str | None
    released: bool
    chain: Chain

    @property
    def resource(self) -> str: ...

    def _listening(self) -> bool: ...


__all__ = ["RELEASE_STEP", "Chain", "chained_sleep", "holder_to_wait_for", "leave", "passed"]

# The longest step (seconds) of a wait for the release in the database: a
# cancelled wait ends within it.
RELEASE_STEP = 0.25


def holder_to_wait_for(wait: Wait, state: QueueState) -> str | None:
    """The owner whose release ``wait`` waits for in the database at its next
    sleep: the holder where it heads the queue and sees the lock held, the
    waiter just ahead where it does not head it; where no listener wakes it.
    None: it sleeps on its ``wakeup`` (and the backoff decides how long)."""
    if state.holder != wait.unannounced:
        wait.unannounced = None  # a new holder: its release may be announced
    wait.chain.ahead = None
    if not wait.queue.waits_for_release or conf.LISTEN is False:
        return None
    if wait.wakeup.sleeps_on_loop or wait._listening():
        return None
    if state.is_head:
        if state.free or state.holder is None or wait.unannounced is not None:
            return None
        return state.holder
    if wait.ticket is None or not state.queued:
        return None
    ahead = wait.queue.owner_ahead(wait.resource, wait.ticket)
    if ahead is None or ahead == wait.claim.owner or ahead == wait.chain.missed:
        wait.chain.missed = None  # its gate was not held: this sleep polls, the next tries
        return None
    wait.chain.ahead = ahead
    return ahead


def chained_sleep(wait: Wait, sleep: float) -> float:
    """The sleep of a waiter behind the head that waits at the gate of the one
    ahead: as long as a polling waiter's longest, so that it still looks that
    often (a paused head, seen stalled, is passed within about a second:
    ``backoff.head_grace``), where the backoff would have it look sooner."""
    return conf.BACKOFF_MAX if wait.chain.ahead is not None else sleep


def passed(wait: Wait) -> bool:
    """Whether ``wait``'s last sleep ended with the release it waited for: its
    next step tries before it looks. The take decides under the row's lock
    that the ticket still counts and heads the queue (a waiter of a higher
    priority may have queued ahead meanwhile; the waiter ahead left without
    the lock), or counts those ahead of a reader or a permit; a refused try
    looks as any step."""
    released, wait.released = wait.released, False
    return released


def pause(wait: Wait, seconds: float) -> None:
    """Sleep up to ``seconds``: in the database until the release where
    ``holder_to_wait_for`` chose it (in steps, so that ``cancel`` ends it), else
    on ``wakeup``. An exclusive waiter holds its own gate meanwhile."""
    holder, wait.release_of = wait.release_of, None
    own = wait.claim.owner if wait.claim.exclusive else ""
    ends = time.monotonic() + seconds
    while holder is not None and not wait.cancelled:
        left = ends - time.monotonic()
        if left <= 0:
            return
        step = min(left, RELEASE_STEP)
        wait.chain.gated = wait.chain.gated or own != ""  # whatever the wait ends with
        released = wait.queue.wait_for_release(wait.resource, holder, step, own)
        if released is None:
            # Nothing announces this release (its gate is not held by another
            # session: taken elsewhere, released just now, or the waiter ahead
            # not at a gate yet): look now, and poll while it holds (the
            # holder), or for one sleep (the waiter ahead).
            if wait.chain.ahead is not None:
                wait.chain.missed = holder
            else:
                wait.unannounced = holder
            return
        if released:
            wait.released = True  # (``passed``)
            return
    wait.wakeup.wait(max(ends - time.monotonic(), 0.0))


def leave(wait: Wait) -> None:
    """Give up the waiter's own gate as its wait ends without the lock (with
    it, the gate is the holder's, which the release gives up)."""
    if wait.chain.gated and not wait.acquired:
        wait.chain.gated = False
        wait.queue.leave_gate(wait.resource, wait.claim.owner)
