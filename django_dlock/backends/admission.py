"""Who may hold a resource: the decision of an acquisition, for every kind of
lock, as a pure function of what the acquisition found under the resource's
row lock. The portable operations (``LockBackend``) carry it out; its cases
are the contract's ("Lock kinds"), and each has a test of its own.

- An exclusive holder excludes every other holder. A reader (``shared``) is
  admitted while no exclusive holder holds the resource and no writer queued
  before it (writer preference: readers that come later wait behind a queued
  writer, so a stream of readers cannot starve it). A writer is admitted when
  nobody holds the resource.
- A semaphore of N permits admits a holder while fewer than N hold it and
  fewer than the permits left queued before it.
- The holder again: a later expiry, the same token; reentrant, one hold more.
- The only reader asking for the lock exclusively upgrades; the exclusive
  holder asking for it shared downgrades. Either is a new grant: a new token.
- A re-entry or a change of mode (``claim.held_token``) is of the grant the
  claimant holds: refused when that grant was lost, even where the resource is
  free (a new grant in its place would hide the loss from its holder).
- A resource whose exclusive holder lost it (its lease ran out, or an
  operator force-released it) with a lock-delay is refused to every claim
  until the delay ends (``LockRow.available_at``); a release by the holder
  leaves no delay.
- While a resource has holders, a claim of another kind (a semaphore where it
  is a lock, a lock where it is a semaphore, another limit) is a mismatch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from django_dlock.backends.results import LockRow
from django_dlock.rules import kind_of, same_owner
from django_dlock.rules.claim import Claim
from django_dlock.rules.predicates import may_join


class Action(enum.Enum):
    REFUSE = "refuse"  # held in a way that excludes the claim
    MISMATCH = "mismatch"  # the resource is another kind of lock while it has holders
    TAKE = "take"  # the claimant becomes the exclusive holder (a new token)
    AGAIN = "again"  # the exclusive holder again (same token)
    UPGRADE = "upgrade"  # the only reader becomes the exclusive holder (a new token)
    JOIN = "join"  # a new shared hold (a new token)
    AGAIN_SHARED = "again_shared"  # a shared holder again (same token)
    DOWNGRADE = "downgrade"  # the exclusive holder becomes a reader (a new token)


@dataclass(frozen=True)
class Admission:
    action: Action
    hold: LockRow | None = None  # the claimant's own shared hold, where it has one
    kind: str | None = None  # MISMATCH: the kind the resource is


def admit(
    header: LockRow, holds: list[LockRow], claim: Claim, queued: tuple[int, int]
) -> Admission:
    """The decision on ``claim`` for a resource whose row is ``header`` (locked)
    and whose valid shared holds are ``holds``; ``queued``: the live waiters
    queued before the claim (all of them, and those wanting it exclusively)."""
    if header.held_by_shared and holds:
        return _admit_beside_shared(header, holds, claim, queued)
    if header.held and not header.held_by_shared:
        mine = same_owner(header.owner, claim.owner)
        if claim.kind.limit is not None:
            return Admission(Action.MISMATCH, kind=kind_of(None))
        if not mine or not _holds_still(header, claim):
            return Admission(Action.REFUSE)
        return Admission(Action.DOWNGRADE if claim.kind.shared else Action.AGAIN)
    # Free: nobody holds it. (A row that shows shared holders none of which is
    # valid is free too: PostgreSQL's one-statement release keeps the row's
    # count of holds, which still counts holds that expired unreleased.)
    if header.available_at is not None:  # its holder's lock-delay runs
        return Admission(Action.REFUSE)
    if claim.held_token is not None:  # the grant it meant was lost
        return Admission(Action.REFUSE)
    if claim.exclusive:
        return Admission(Action.TAKE)
    return _join(claim, holders=0, queued=queued)


def _admit_beside_shared(
    header: LockRow, holds: list[LockRow], claim: Claim, queued: tuple[int, int]
) -> Admission:
    if claim.kind.limit != header.limit:
        return Admission(Action.MISMATCH, kind=kind_of(header.limit))
    mine = next((hold for hold in holds if same_owner(hold.owner, claim.owner)), None)
    if mine is not None and not _holds_still(mine, claim):
        mine = None  # a grant of its own, but not the one it means
    if mine is None and claim.held_token is not None:
        return Admission(Action.REFUSE)
    if claim.exclusive:  # refused beside others, its own hold stays (``Refusal.grant_held``)
        return Admission(
            Action.UPGRADE if mine is not None and len(holds) == 1 else Action.REFUSE, hold=mine
        )
    if mine is not None:
        return Admission(Action.AGAIN_SHARED, hold=mine)
    return _join(claim, holders=len(holds), queued=queued)


def _holds_still(hold: LockRow, claim: Claim) -> bool:
    """Whether ``hold``, the claimant's, is the grant its claim means (any, without one)."""
    return claim.held_token is None or hold.fencing_token == claim.held_token


def _join(claim: Claim, *, holders: int, queued: tuple[int, int]) -> Admission:
    admitted = may_join(claim.kind.limit, holders=holders, ahead=queued[0], writers_ahead=queued[1])
    return Admission(Action.JOIN if admitted else Action.REFUSE)
