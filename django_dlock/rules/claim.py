"""What an acquisition asks for: a ``Claim``, which every layer from ``lock()``
down to the backends passes on (none reads the caller's arguments again)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = ["Claim"]


@dataclass(frozen=True, slots=True)
class Claim:
    """What an acquisition asks for."""

    resource: str
    owner: str
    duration: timedelta
    shared: bool = False  # a reader (or, with a limit, a permit) rather than the exclusive holder
    limit: int | None = None  # a semaphore's number of permits
    reentrant: bool = False  # the holder again adds a hold rather than only extending
    label: str = ""
    ticket: int | None = None  # lock()'s waiter, which leaves its queue once admitted
    # A re-entry or a change of mode of the grant with this fencing token: refused
    # unless the claimant holds that grant still (a hold that was lost is neither
    # entered again nor replaced by a new grant its holder would take for it).
    held_token: int | None = None
    # The holder's lock-delay (exclusive only): how long the resource stays
    # refused to everyone after this grant is lost rather than released.
    lock_delay: timedelta | None = None
    # lock()'s place in the wait queue: higher first (see ``backends.queue.PRIORITY_STEP``).
    priority: int = 0

    @property
    def exclusive(self) -> bool:
        return not self.shared and self.limit is None

    @property
    def adds_a_hold(self) -> bool:
        """Whether the holder's acquisition adds a hold: reentrant, and not a
        queued waiter's (``lock()`` re-enters without queuing, so a waiter that
        finds the lock its own was handed it by a release as it looked)."""
        return self.reentrant and self.ticket is None
