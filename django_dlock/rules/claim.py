"""What an acquisition asks for: a ``Claim``, which every layer from ``lock()``
down to the backends passes on (none reads the caller's arguments again)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django_dlock.exceptions import InvalidArgument
from django_dlock.kinds import LockKind
from django_dlock.rules import EXCLUSIVE, SHARED, duration_of
from django_dlock.rules.frozen import fast_init
from django_dlock.validators import (
    validate_label,
    validate_lock_delay,
    validate_priority,
    validate_resource,
)

__all__ = ["EXCLUSIVE_KIND", "Claim", "claim_for", "claims_for"]


#: The kind of a claim that names none: the exclusive lock.
EXCLUSIVE_KIND = LockKind()


@fast_init
@dataclass(frozen=True, slots=True)
class Claim:
    """What an acquisition asks for."""

    resource: str
    owner: str
    duration: timedelta
    # Exclusive, a reader, or a semaphore's permit; reentrant or not (checked when made).
    kind: LockKind = EXCLUSIVE_KIND
    label: str = ""
    ticket: int | None = None  # lock()'s waiter, which leaves its queue once admitted
    # A re-entry or a change of mode of the grant with this fencing token: refused
    # unless the claimant holds that grant still (a hold that was lost is neither
    # entered again nor replaced by a new grant its holder would take for it).
    held_token: int | None = None
    # The holder's lock-delay (exclusive only): how long the resource stays
    # refused to everyone after this grant is lost rather than released.
    lock_delay: timedelta | None = None
    # lock()'s place in the wait queue: higher first (see ``backends.tickets.PRIORITY_STEP``).
    priority: int = 0
    # A blocking lock()'s first take, before it queues (no ticket): admitted
    # only where no live waiter is queued (``IS_HEAD``, counting every waiter),
    # so that it folds the wait's first look into the take and never passes
    # those already waiting. A reader's or a permit's take counts them anyway.
    behind_queue: bool = False

    @property
    def exclusive(self) -> bool:
        return self.kind.is_exclusive

    @property
    def adds_a_hold(self) -> bool:
        """Whether the holder's acquisition adds a hold: reentrant, and not a
        queued waiter's (``lock()`` re-enters without queuing, so a waiter that
        finds the lock its own was handed it by a release as it looked)."""
        return self.kind.reentrant and self.ticket is None


def claim_for(
    resource: str,
    owner: str,
    ttl: float | None,
    *,
    kind: LockKind = EXCLUSIVE_KIND,
    label: str = "",
    held_token: int | None = None,
    lock_delay: float | timedelta | None = None,
    priority: int = 0,
) -> Claim:
    """What an acquisition of ``resource`` by ``owner`` (both checked by the
    caller, as ``kind``, a ``LockKind`` checked when made) asks for, each other
    argument checked here, once: ``InvalidArgument`` for a bad one. ``lock()``
    makes its claim once and only changes the owner and the re-entered grant
    of it for each acquisition."""
    delay = (
        0.0 if lock_delay is None else validate_lock_delay(lock_delay, exclusive=kind.is_exclusive)
    )
    return Claim(
        resource=resource,
        owner=owner,
        duration=duration_of(ttl),
        kind=kind,
        label=validate_label(label),
        held_token=held_token,
        lock_delay=timedelta(seconds=delay) if delay else None,
        priority=validate_priority(priority),
    )


def claims_for(
    items: Sequence[str | tuple[str, str]], owner: str, ttl: float | None, label: str = ""
) -> list[Claim]:
    """The claims of ``acquire_all()``'s items (a resource, or ``(resource,
    mode)``) by ``owner`` (checked by the caller), each item checked here."""
    claims = []
    for item in items:
        resource, mode = (item, EXCLUSIVE) if isinstance(item, str) else item
        validate_resource(resource)
        if mode not in (EXCLUSIVE, SHARED):
            raise InvalidArgument(
                f"A mode must be {EXCLUSIVE!r} or {SHARED!r}, not {mode!r}.", code="mode"
            )
        kind = LockKind.shared_lock() if mode == SHARED else EXCLUSIVE_KIND
        claims.append(claim_for(resource, owner, ttl, kind=kind, label=label))
    if not claims or len({claim.resource for claim in claims}) != len(claims):
        raise InvalidArgument("Name each resource once, and at least one.", code="resources")
    return claims
