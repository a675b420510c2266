"""The portable release of a lock held by shared holders (readers, or a
semaphore's permits): ``LockBackend.give_up``'s, inside its lock transaction.
Each holder has a row in ``distributed_lock_holds``; the resource's row stays
held until the last of them goes."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from django_dlock.backends.holds import Holds
from django_dlock.backends.lock_rows import LockRows
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.results import LockRow, Released
from django_dlock.rules import SHARED_HOLDERS, ReleaseResult, same_owner
from django_dlock.rules.grant import OFFER_LEASE, revoked

__all__ = ["give_up_shared", "revoked_owner"]

# What a revoked grant writes: its mark (the lock-delay) stays.
REVOKED = ["owner", "expires_at", "limit"]


class Releasing(Protocol):
    """What the release reads of its backend (``LockBackend``: no import cycle)."""

    rows: LockRows
    holds: Holds
    queue: WaiterQueue

    def mark_released(self, row: LockRow) -> None: ...

    def permit_freed(self, header: LockRow, held: list[LockRow]) -> None: ...


def give_up_shared(
    backend: Releasing, header: LockRow, owner: str | None, forced: bool, revoke: bool = False
) -> Released:
    """``LockBackend.give_up``'s portable release of ``header``'s resource,
    held by shared holders: ``owner``'s hold (one of its holds, unless
    ``forced``), or every hold (``owner=None``). An operator's (``forced``) or
    ``release_all``'s (``revoke``) release of a hold a release may have granted
    a waiter that has not started on its notice yet revokes it (``_revoked``)."""
    holds = backend.holds.valid_holds(header.resource, header.now)
    if not holds:  # they all expired (or were purged) since the row last covered them
        return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
    if owner is None:  # an operator's: every hold goes
        backend.holds.delete_holds(header.resource)
        _free(backend, header, revoke=True)
        return Released(
            row=holds[0],
            owner=SHARED_HOLDERS,
            result=ReleaseResult.RELEASED,
            released=tuple(holds),
        )
    mine = next((hold for hold in holds if same_owner(hold.owner, owner)), None)
    if mine is None:
        return Released(row=None, owner=SHARED_HOLDERS, result=ReleaseResult.FORBIDDEN)
    if not forced and mine.hold_count > 1:
        hold = replace(mine, hold_count=mine.hold_count - 1)
        backend.holds.update_hold(hold, ["hold_count"])
        return Released(row=hold, owner=mine.owner, result=ReleaseResult.DECREMENTED)
    # Until when a revoked grant's hold keeps its place (None: not one).
    until = _revoked(header, mine) if forced or revoke else None
    others = [hold for hold in holds if hold is not mine]
    released = replace(mine, expires_at=header.now)
    if others and until is not None:
        # Its waiter may still start on its notice: the hold stays, nobody's
        # (its waiter's extension fails), until its offer lease ends, so that
        # the others' last release frees no writer, nor a permit, beside it.
        backend.holds.update_hold(
            replace(mine, owner=revoked_owner(mine), expires_at=until, hold_count=1),
            ["owner", "expires_at", "hold_count"],
        )
        row = replace(header, expires_at=max(until, *(hold.expires_at for hold in others)))
        backend.rows.update(row, ["expires_at"])
        return Released(
            row=released, owner=mine.owner, result=ReleaseResult.RELEASED, released=(mine,)
        )
    backend.holds.delete_holds(header.resource, mine.owner)
    if others:
        # The row stays held until the last of the others expires; a
        # semaphore's freed permit goes to the head of the queue.
        row = replace(
            header,
            expires_at=max(hold.expires_at for hold in others),
            hold_count=len(others),
        )
        backend.rows.update(row, ["expires_at", "hold_count"])
        if header.limit is not None:
            backend.permit_freed(row, others)
    else:
        # An operator's release of the last hold may revoke a grant (``_free``).
        _free(backend, header, revoke=until is not None)
    return Released(row=released, owner=mine.owner, result=ReleaseResult.RELEASED, released=(mine,))


def _free(backend: Releasing, header: LockRow, *, revoke: bool) -> None:
    """Mark ``header``'s resource released: none of its holds is left. Where
    ``revoke`` (an operator's release of holds a release may have granted with
    no statement of their waiters' own, ``shared_grants``) and the header is
    still an ``UNCONFIRMED`` grant, the grant is revoked as an exclusive one
    is (``rules.grant``): no holder, kept from everyone until its offer lease
    ends, since a granted reader may still start on its wake-up until then."""
    until = revoked(header) if revoke else None
    if until is not None:
        backend.rows.update(replace(header, owner="", expires_at=until, limit=None), REVOKED)
    else:
        backend.mark_released(replace(header, owner="", expires_at=header.now, limit=None))


def _revoked(header: LockRow, hold: LockRow) -> datetime | None:
    """Until when ``hold`` (valid, of ``header``'s resource) is kept from
    others where an operator releases it: the offer lease's end (``OFFER_END``)
    where a release may have granted it and its waiter not started yet: it is
    younger than the lease, the resource is marked as granted (``UNCONFIRMED``:
    ``shared_grants`` wrote the mark), and it is of the last grant (no older
    than the row's start) or as a grant left it (for no more than the lease:
    nobody extended it). Else None. A hold that joined after the grant within
    its lease is kept too, for the rest of that second: no harm."""
    lease = hold.expires_at - hold.acquired_at
    if hold.acquired_at < header.acquired_at and lease > timedelta(seconds=OFFER_LEASE):
        return None
    return revoked(replace(hold, lock_delay=header.lock_delay))


def revoked_owner(hold: LockRow) -> str:
    """The owner of a revoked grant's hold while it keeps its place: nobody's
    (no caller may name an owner that starts with the reserved one's name
    and a space), and one per hold (the owner is unique per resource)."""
    return f"{SHARED_HOLDERS} revoked {hold.fencing_token}"
