"""The interface every database backend of django-dlock implements, with the
portable version of each lock operation.

Each lock operation is one method (``take``, ``extend``, ``give_up``, the
queue's ``enqueue_waiter``), and the decision it makes lives there: here, in
Python, between a ``SELECT ... FOR UPDATE`` of the resource's row and the write,
inside one transaction of the operation's own (``in_lock_transaction``). A
vendor overrides an operation with a form that decides in SQL, in fewer
statements, and calls ``super()`` where that form does not apply, as Django's
``BaseDatabaseOperations`` and its vendor subclasses do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.core.checks import CheckMessage

from django_dlock.backends.admission import Action, Admission, admit
from django_dlock.backends.checks import BackendChecks
from django_dlock.backends.clock import DatabaseNow, now_plus
from django_dlock.backends.features import BackendFeatures
from django_dlock.backends.holds import HoldStatements
from django_dlock.backends.purge import Purge, PurgedBatch, expired_q
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.renewals import Renewals
from django_dlock.backends.results import Claim, LockRow, Released, Renewed, Taken
from django_dlock.backends.statements import LockStatements
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED_HOLDERS, ReleaseResult, same_owner
from django_dlock.transactions import in_lock_transaction

__all__ = ["LockBackend", "PurgedBatch", "expired_q"]


# The columns a new holder of a resource's row writes.
HEADER_WRITTEN = [
    "owner", "acquired_at", "expires_at", "fencing_token", "hold_count", "label", "limit",
]  # fmt: skip


class LockBackend(Purge, Renewals, LockStatements, HoldStatements, WaiterQueue):
    """The lock operations on one database alias.

    ``take``, ``extend``, ``give_up`` and ``purge_batch`` each run in a lock
    transaction of their own; the queue's statements run alone, in autocommit.
    """

    vendor: ClassVar[str]
    features_class: ClassVar[type[BackendFeatures]] = BackendFeatures

    def __init__(self, using: str) -> None:
        super().__init__(using)
        self.features = self.features_class(using)

    # -- acquire, renew, release -----------------------------------------------------

    def take(self, claim: Claim) -> Taken:
        """Acquire, as ``backends.admission`` decides: the claimant becomes a
        holder (a new token), or the holder again (a later expiry, the same
        token; reentrant, one hold more), or nothing. Without a row, the first
        one is inserted. Once admitted, the waiter ticket ``claim.ticket``
        leaves its queue in the same transaction (one commit, and no moment
        where the next waiter sees the new holder still queued ahead of it)."""
        return in_lock_transaction(self, lambda: self._take(claim))

    def _take(self, claim: Claim) -> Taken:
        header = self.select_for_update(claim.resource)
        if header is None and claim.held_token is not None:  # purged: the grant is lost
            return Taken(row=None, previous_owner=None, renewed=False)
        if header is None:
            if claim.exclusive:
                inserted = self.insert(
                    claim.resource, claim.owner, claim.duration, label=claim.label
                )
                if inserted is not None:
                    self._leave(claim.ticket)
                    return Taken(row=inserted, previous_owner=None, renewed=False)
            else:  # a released row, on which the admission below decides
                header = self.insert(claim.resource, "", claim.duration)
            if header is None:
                # Another process inserted the row first (ON CONFLICT DO NOTHING
                # waited for its commit): read the winner's row and decide on it.
                header = self.select_for_update(claim.resource)
            if header is None:  # the winner's row is gone already; rare enough to
                return Taken(row=None, previous_owner=None, renewed=False)  # call it held
        holds = self.valid_holds(claim.resource) if header.held_by_shared else []
        queued = (0, 0) if claim.exclusive else self.queued_before(claim.resource, claim.ticket)
        taken = self._carry_out(admit(header, holds, claim, queued), header, claim, len(holds))
        if taken.row is not None:
            self._leave(claim.ticket)
            if taken.row.shared and claim.ticket is not None and not taken.renewed:
                # A waiter admitted beside others: the next in line may fit too
                # (a reader behind it, a permit left), and looks at once.
                self.wake_head(claim.resource)
        return taken

    def _carry_out(
        self, admission: Admission, header: LockRow, claim: Claim, holders: int
    ) -> Taken:
        """Write what ``admission`` decided for ``claim`` on the locked ``header``
        (beside ``holders`` valid shared holds)."""
        action, now = admission.action, header.now
        before = header.owner
        if action is Action.REFUSE:
            return Taken(row=None, previous_owner=before, renewed=False)
        if action is Action.MISMATCH:
            return Taken(row=None, previous_owner=before, renewed=False, mismatch=admission.kind)
        expires_at = now + claim.duration
        if action is Action.AGAIN:
            hold_count = header.hold_count + 1 if claim.adds_a_hold else header.hold_count
            row = replace(header, expires_at=expires_at, hold_count=hold_count)
            self.update(row, ["expires_at", "hold_count"])
            return Taken(row=row, previous_owner=before, renewed=True)
        if action is Action.AGAIN_SHARED:
            assert admission.hold is not None  # noqa: S101 - admit() gives the hold
            hold = admission.hold
            hold_count = hold.hold_count + 1 if claim.adds_a_hold else hold.hold_count
            hold = replace(hold, expires_at=expires_at, hold_count=hold_count)
            self.update_hold(hold, ["expires_at", "hold_count"])
            self._cover(header, expires_at)
            return Taken(row=hold, previous_owner=before, renewed=True)
        if action in (Action.TAKE, Action.UPGRADE):
            hold_count = 1
            if admission.hold is not None:  # the reader's holds carry over
                hold_count = admission.hold.hold_count
                self.delete_holds(claim.resource)
            row = replace(
                header,
                owner=claim.owner,
                acquired_at=now,
                expires_at=expires_at,
                fencing_token=header.fencing_token + 1,
                hold_count=hold_count,
                label=claim.label,
                limit=None,
            )
            self.update(row, HEADER_WRITTEN)
            return Taken(row=row, previous_owner=before, renewed=False)
        if action is Action.DOWNGRADE:
            hold = self._hold_for(replace(header, owner="", hold_count=header.hold_count), claim)
            return Taken(row=hold, previous_owner=before, renewed=False)
        # JOIN: a new shared hold
        hold = self._hold_for(header, claim, others=holders)
        return Taken(row=hold, previous_owner=before, renewed=False)

    def _hold_for(
        self, header: LockRow, claim: Claim, *, hold_count: int = 1, others: int = 0
    ) -> LockRow:
        """A new shared hold of ``claim`` beside the ``others`` valid holds
        ``header`` covers, with the resource's next token; the header then
        shows shared holders, and how many."""
        token = header.fencing_token + 1
        shared_before = header.held_by_shared and others > 0
        hold = self.insert_hold(
            claim.resource,
            claim.owner,
            claim.duration,
            token=token,
            label=claim.label,
            limit=claim.limit,
            hold_count=hold_count,
        )
        if shared_before:  # its hold_count counts the shared holds
            covered = replace(
                header,
                fencing_token=token,
                expires_at=max(header.expires_at, hold.expires_at),
                hold_count=others + 1,
            )
            self.update(covered, ["fencing_token", "expires_at", "hold_count"])
        else:
            covered = replace(
                header,
                owner=SHARED_HOLDERS,
                acquired_at=hold.acquired_at,
                expires_at=hold.expires_at,
                fencing_token=token,
                hold_count=1,
                label="",
                limit=claim.limit,
            )
            self.update(covered, HEADER_WRITTEN)
        return hold

    def _cover(self, header: LockRow, expires_at: datetime) -> None:
        """Keep the resource's row held until its last shared hold expires."""
        if expires_at > header.expires_at:
            self.update(replace(header, expires_at=expires_at), ["expires_at"])

    def _leave(self, ticket: int | None) -> None:
        if ticket is not None:
            self.leave_queue(ticket)

    def extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        """Renew: a later expiry of the hold ``owner`` validly has."""
        return in_lock_transaction(self, lambda: self._extend(resource, owner, duration))

    def _extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        header = self.select_for_update(resource)
        if header is None or header.owner == "":
            return Renewed(row=None, exists=False)
        expires_at = header.now + duration
        if header.held_by_shared:
            mine = self._hold_of(resource, owner)
            if mine is None:
                return Renewed(row=None, exists=True)
            hold = replace(mine, expires_at=expires_at)
            self.update_hold(hold, ["expires_at"])
            self._cover(header, expires_at)
            return Renewed(row=hold, exists=True)
        if not header.held or not same_owner(header.owner, owner):
            return Renewed(row=None, exists=True)
        row = replace(header, expires_at=expires_at)
        self.update(row, ["expires_at"])
        return Renewed(row=row, exists=True)

    def _hold_of(self, resource: str, owner: str) -> LockRow | None:
        """``owner``'s valid shared hold of ``resource``."""
        return next(
            (hold for hold in self.valid_holds(resource) if same_owner(hold.owner, owner)), None
        )

    def give_up(self, resource: str, owner: str | None, *, forced: bool = False) -> Released:
        """Release ``owner``'s hold (one of its holds, when it has several,
        unless ``forced``); ``owner=None`` (forced): every hold, whoever holds
        it. Marks the resource's row released once nobody holds it
        (``mark_released``)."""
        return in_lock_transaction(self, lambda: self._give_up(resource, owner, forced))

    def _give_up(self, resource: str, owner: str | None, forced: bool) -> Released:
        header = self.select_for_update(resource)
        if header is None or not header.held:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if header.held_by_shared:
            return self._give_up_shared(header, owner, forced)
        if owner is not None and not same_owner(header.owner, owner):
            return Released(row=None, owner=header.owner, result=ReleaseResult.FORBIDDEN)
        if not forced and header.hold_count > 1:
            row = replace(header, hold_count=header.hold_count - 1)
            self.update(row, ["hold_count"])
            return Released(row=row, owner=header.owner, result=ReleaseResult.DECREMENTED)
        # The row stays, expired and ownerless, to keep the fencing token counting.
        row = replace(header, owner="", expires_at=header.now)
        self.mark_released(row)
        return Released(
            row=row, owner=header.owner, result=ReleaseResult.RELEASED, released=(header,)
        )

    def _give_up_shared(self, header: LockRow, owner: str | None, forced: bool) -> Released:
        holds = self.valid_holds(header.resource)
        if not holds:  # they all expired (or were purged) since the row last covered them
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if owner is None:  # an operator's: every hold goes
            self.delete_holds(header.resource)
            self.mark_released(replace(header, owner="", expires_at=header.now, limit=None))
            first = holds[0] if holds else None
            return Released(
                row=first,
                owner=SHARED_HOLDERS,
                result=ReleaseResult.RELEASED,
                released=tuple(holds),
            )
        mine = next((hold for hold in holds if same_owner(hold.owner, owner)), None)
        if mine is None:
            return Released(row=None, owner=SHARED_HOLDERS, result=ReleaseResult.FORBIDDEN)
        if not forced and mine.hold_count > 1:
            hold = replace(mine, hold_count=mine.hold_count - 1)
            self.update_hold(hold, ["hold_count"])
            return Released(row=hold, owner=mine.owner, result=ReleaseResult.DECREMENTED)
        self.delete_holds(header.resource, mine.owner)
        others = [hold for hold in holds if hold is not mine]
        released = replace(mine, expires_at=header.now)
        if others:
            # The row stays held until the last of the others expires; a
            # semaphore's freed permit goes to the head of the queue.
            row = replace(
                header,
                expires_at=max(hold.expires_at for hold in others),
                hold_count=len(others),
            )
            self.update(row, ["expires_at", "hold_count"])
            if header.limit is not None:
                self.wake_head(header.resource)
        else:
            self.mark_released(replace(header, owner="", expires_at=header.now, limit=None))
        return Released(
            row=released, owner=mine.owner, result=ReleaseResult.RELEASED, released=(mine,)
        )

    def holders(self, resource: str) -> list[LockRow]:
        """The valid holds of ``resource``, oldest first (two reads, no lock:
        for display)."""
        header = self._fetch_row(self._read_sql, [resource])
        if header is None or not header.held:
            return []
        return self.valid_holds(resource) if header.held_by_shared else [header]

    def take_all(self, claims: Sequence[Claim]) -> list[Taken] | None:
        """Every acquisition of ``claims`` in one lock transaction, in the order
        of their resources' names (so that two callers never wait for each
        other in a circle), or none of them: ``None`` when one was refused, or
        the answers (one with ``mismatch``) when one was of another kind."""
        try:
            taken = in_lock_transaction(self, lambda: self._take_all(claims))
        except _NotAll as refused:
            return refused.taken if refused.taken[-1].mismatch is not None else None
        return [taken[claim.resource] for claim in claims]

    def _take_all(self, claims: Sequence[Claim]) -> dict[str, Taken]:
        taken: dict[str, Taken] = {}
        for claim in sorted(claims, key=lambda claim: claim.resource):
            one = taken[claim.resource] = self._take(claim)
            if one.row is None:
                raise _NotAll(list(taken.values()))  # rolls back those taken before
        return taken

    def give_up_all(self, resources: Sequence[str], owner: str) -> list[Released]:
        """Release ``owner``'s hold of each of ``resources`` in one lock
        transaction (in the order of their names); the answers in the order asked."""
        released = in_lock_transaction(
            self,
            lambda: {name: self._give_up(name, owner, False) for name in sorted(resources)},
        )
        return [released[name] for name in resources]

    def mark_released(self, row: LockRow) -> None:
        """Write the released ``row`` (no owner, expired) inside its lock
        transaction; a vendor also wakes the head of the resource's queue here."""
        self.update(row, ["owner", "expires_at", "limit"])

    def wake_head(self, resource: str) -> None:
        """Wake the head of ``resource``'s queue, once this lock transaction
        commits, to look at the lock now (a permit came free, or a waiter was
        admitted beside others). Waiters that nothing wakes poll."""

    def granted(
        self, resource: str, owner: str, ticket: int, duration: timedelta
    ) -> LockRow | None:
        """The lock, if a release handed it to the waiter of ``ticket`` and its
        offer still stands: held by ``owner`` for the hand-over's lease
        (``HANDOVER_LEASE``), the ticket gone. One autocommit ``UPDATE`` takes
        the offer: the lock is the waiter's for ``duration`` from now. An offer
        that lapsed (the waiter was paused) was never the waiter's: its lease
        ran out, and the next waiter took the lock or may."""
        if not self.features.grants_on_release:
            return None
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(self.using, now_plus(duration))
        # Only quoted identifiers and Django-compiled SQL are formatted in.
        sql = (
            f"UPDATE {self.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
            f"WHERE {qn('resource')} = %s AND {qn('owner')} = %s "
            f"AND {qn('expires_at')} > {now_sql} AND NOT EXISTS "
            f"(SELECT 1 FROM {self.waiters_table} w WHERE w.{qn('id')} = %s) "
            f"RETURNING {', '.join(self.columns)}, {now_sql}"
        )
        params = [*expires_params, resource, owner, *now_params, ticket, *now_params]
        return self._fetch_row(sql, params)

    # -- system checks -------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The system check messages about this database (Django's check
        arguments; see ``django_dlock.backends.checks``). A vendor runs its own."""
        return BackendChecks(self.using).check(**kwargs)


class _NotAll(Exception):
    """An all-or-nothing acquisition found one lock it could not take."""

    def __init__(self, taken: list[Taken]) -> None:
        super().__init__("not all locks could be taken")
        self.taken = taken
