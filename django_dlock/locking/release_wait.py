"""The head of a queue waiting for the release inside the database, where no
listener wakes it and the database can tell (MariaDB: the resource's gate,
``backends.mysql.wake``): the sync ``lock()`` sleeps there rather than on its
``Wakeup``, and looks once the holder released. An async waiter sleeps on its
event loop, which a blocked connection would hold up: it polls."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from django_dlock.conf import conf

if TYPE_CHECKING:
    from django_dlock.locking.queue import Queue, QueueState
    from django_dlock.locking.wakeup import Wakeup


class Wait(Protocol):
    """What of ``waiting.Wait`` this module reads and sets."""

    queue: Queue
    wakeup: Wakeup
    cancelled: bool
    release_of: str | None
    unannounced: str | None
    released: bool

    @property
    def resource(self) -> str: ...

    def _listening(self) -> bool: ...


__all__ = ["RELEASE_STEP", "holder_to_wait_for", "passed", "pause"]

# The longest step (seconds) of a wait for the release in the database: a
# cancelled wait ends within it.
RELEASE_STEP = 0.25


def holder_to_wait_for(wait: Wait, state: QueueState) -> str | None:
    """The holder whose release ``wait`` waits for in the database at its next
    sleep: where it heads the queue, sees the lock held, and no listener wakes
    it. None: it sleeps on its ``wakeup`` (and the backoff decides how long)."""
    if state.holder != wait.unannounced:
        wait.unannounced = None  # a new holder: its release may be announced
    if state.free or not state.is_head or state.holder is None or wait.unannounced is not None:
        return None
    if not wait.queue.waits_for_release or conf.LISTEN is False:
        return None
    if wait.wakeup.sleeps_on_loop or wait._listening():
        return None
    return state.holder


def passed(wait: Wait) -> bool:
    """Whether ``wait``'s last sleep ended with the release it waited for: its
    next step tries before it looks. The take decides under the row's lock
    that the ticket still counts and heads the queue (a waiter of a higher
    priority may have queued ahead meanwhile), or counts those ahead of a
    reader or a permit; a refused try looks as any step."""
    released, wait.released = wait.released, False
    return released


def pause(wait: Wait, seconds: float) -> None:
    """Sleep up to ``seconds``: in the database until the release where
    ``holder_to_wait_for`` chose it (in steps, so that ``cancel`` ends it), else
    on ``wakeup``."""
    holder, wait.release_of = wait.release_of, None
    ends = time.monotonic() + seconds
    while holder is not None and not wait.cancelled:
        left = ends - time.monotonic()
        if left <= 0:
            return
        step = min(left, RELEASE_STEP)
        released = wait.queue.wait_for_release(wait.resource, holder, step)
        if released is None:
            # Nothing announces this holder's release (its gate is not held by
            # another session: taken elsewhere, or released just now): look
            # now, and poll while it holds.
            wait.unannounced = holder
            return
        if released:
            wait.released = True  # (``passed``)
            return
    wait.wakeup.wait(max(ends - time.monotonic(), 0.0))
