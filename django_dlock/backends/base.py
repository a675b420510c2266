"""The interface every database backend of django-dlock implements, with the
portable version of each lock operation.

A backend is composed of named parts, as Django's ``DatabaseWrapper`` is of
``ops`` and ``features``: ``features``, ``tables`` (names and row conversions),
``rows``, ``holds``, ``queue``, ``purge``, ``renewals``, ``grants`` (an
admission's writes), ``offers`` (a hand-over's offer), ``throttles`` and
``guard`` (``held.atomic()``). A vendor names its part classes (``queue_class =
PostgreSQLQueue``) and overrides whole methods in them.

Each lock operation is one method here (``take``, ``extend``, ``give_up``, ...),
deciding in Python between a ``SELECT ... FOR UPDATE`` of the resource's row and
the write, in a lock transaction of its own (``in_lock_transaction``). A
vendor's override decides in SQL, in fewer statements, and dispatches once: to
its statement, or to the portable operation (``take_portable``,
``extend_portable``, ``give_up_portable``); no operation re-enters itself
through ``super()``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, ClassVar

from django.core.checks import CheckMessage
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.backends.admission import admit
from django_dlock.backends.checks import BackendChecks
from django_dlock.backends.features import BackendFeatures
from django_dlock.backends.grants import Grants
from django_dlock.backends.guard import guard_for
from django_dlock.backends.holds import Holds
from django_dlock.backends.lock_rows import LockRows, RowLocked
from django_dlock.backends.offers import Offers
from django_dlock.backends.purge import Purge, PurgedBatch
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.renewals import RENEW_CHUNK, Renewals
from django_dlock.backends.results import LockRow, Released, Renewed, Taken
from django_dlock.backends.shared_grants import SharedGrants
from django_dlock.backends.shared_release import give_up_shared
from django_dlock.backends.tables import LockTables
from django_dlock.backends.throttles import ThrottleUses
from django_dlock.backends.transactions import in_lock_transaction
from django_dlock.rules import ReleaseResult, same_owner
from django_dlock.rules.claim import Claim
from django_dlock.rules.grant import revoked
from django_dlock.rules.predicates import is_head

__all__ = ["LockBackend"]


class LockBackend:
    """The lock operations on one database alias.

    ``take``, ``extend``, ``give_up`` and ``purge_batch`` each run in a lock
    transaction of their own; the queue's statements run alone, in autocommit.
    """

    vendor: ClassVar[str]
    features_class: ClassVar[type[BackendFeatures]] = BackendFeatures
    rows_class: ClassVar[type[LockRows]] = LockRows
    holds_class: ClassVar[type[Holds]] = Holds
    queue_class: ClassVar[type[WaiterQueue]] = WaiterQueue
    purge_class: ClassVar[type[Purge]] = Purge
    renewals_class: ClassVar[type[Renewals]] = Renewals
    checks_class: ClassVar[type[BackendChecks]] = BackendChecks
    throttles_class: ClassVar[type[ThrottleUses]] = ThrottleUses

    def __init__(self, using: str) -> None:
        self.using = using
        self.features = self.features_class(using)
        self.tables = LockTables(using)
        self.rows = self.rows_class(self.tables)
        self.holds = self.holds_class(self.tables)
        self.queue = self.queue_class(self.tables, self)
        self.purge = self.purge_class(self.tables)
        self.renewals = self.renewals_class(self.tables, self.holds)
        self.grants = Grants(self.rows, self.holds)
        self.shared_grants = SharedGrants(self.rows, self.holds, self.queue)
        self.offers = Offers(self.tables, self.rows)
        self.throttles = self.throttles_class(using, self)
        self.guard = guard_for(self.tables, self.vendor)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    # -- the transaction -----------------------------------------------------------

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        """Seconds to pause before ``in_lock_transaction`` runs a lock transaction
        again that failed with ``error`` (its ``attempt``-th, the first begun at
        ``time.monotonic()`` ``started``); ``None``: raise ``error``."""
        return None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Wrap the start of a lock transaction (a vendor may change how it begins)."""
        yield

    # -- acquire, renew, release -----------------------------------------------------

    def take(self, claim: Claim) -> Taken:
        """Acquire, as ``backends.admission`` decides: the claimant becomes a
        holder (a new token), or the holder again (a later expiry, the same
        token; reentrant, one hold more), or nothing; the first row inserted.
        The waiter ticket ``claim.ticket`` leaves its queue in the same
        transaction (no moment where the next waiter sees the new holder still
        queued ahead of it); a ticket that no longer counts, or an exclusive
        one not at the head, is refused. A vendor's entry dispatches to its
        statements or to ``take_portable``."""
        return self.take_portable(claim)

    def take_portable(self, claim: Claim) -> Taken:
        """``take`` as every database can: its decision in Python (``admit``),
        between a ``SELECT ... FOR UPDATE`` and the write, in a lock transaction."""
        try:
            return in_lock_transaction(self, lambda: self._take(claim))
        except RowLocked:  # (a blocking lock()'s first take: the caller queues)
            return Taken(row=None, previous_owner=None, renewed=False)

    def _take(self, claim: Claim) -> Taken:
        # A blocking lock() before it queues takes only where nobody waits
        # (``IS_HEAD``), nor waits for a row lock (a holder's guarded block).
        behind = claim.behind_queue and claim.exclusive and claim.ticket is None
        header = self.rows.select_for_update(claim.resource, nowait=behind)
        if header is None and claim.held_token is not None:  # purged: the grant is lost
            return Taken(row=None, previous_owner=None, renewed=False)
        # A waiter takes on a ticket that still counts; an exclusive one only
        # as the head (a reader or a permit: ``admit`` counts those ahead).
        head_of = claim.resource if claim.exclusive else None
        if claim.ticket is not None and not self.queue.ticket_counts(claim.ticket, head_of=head_of):
            return Taken(row=None, previous_owner=None, renewed=False)
        if behind and not is_head(self.queue.queued_before(claim.resource, None)[0]):
            return Taken(row=None, previous_owner=None, renewed=False)
        if header is None:
            if claim.exclusive:
                inserted = self.rows.insert(
                    claim.resource,
                    claim.owner,
                    claim.duration,
                    label=claim.label,
                    lock_delay=claim.lock_delay,
                )
                if inserted is not None:
                    self._leave(claim.ticket)
                    return Taken(row=inserted, previous_owner=None, renewed=False)
            else:  # a released row, on which the admission below decides
                header = self.rows.insert(claim.resource, "", claim.duration)
            if header is None:
                # Another process inserted the row first (ON CONFLICT DO NOTHING
                # waited for its commit): read the winner's row and decide on it.
                header = self.rows.select_for_update(claim.resource)
            if header is None:  # the winner's row is gone already; rare enough to
                return Taken(row=None, previous_owner=None, renewed=False)  # call it held
        holds = self.holds.valid_holds(claim.resource, header.now) if header.held_by_shared else []
        queued = (
            (0, 0) if claim.exclusive else self.queue.queued_before(claim.resource, claim.ticket)
        )
        taken = self.grants.write(admit(header, holds, claim, queued), header, claim, holds)
        if taken.row is not None:
            self._leave(claim.ticket)
            if taken.row.shared and claim.ticket is not None and not taken.renewed:
                # A waiter admitted beside others: the next in line may fit too
                # (a reader behind it, a permit left), and looks at once.
                self.queue.wake_head(claim.resource)
        return taken

    def _leave(self, ticket: int | None) -> None:
        if ticket is not None:
            self.queue.leave_queue(ticket)

    def extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        """Renew: a later expiry of the hold ``owner`` validly has."""
        return self.extend_portable(resource, owner, duration)

    def extend_portable(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        """``extend`` as every database can, in a lock transaction."""
        return in_lock_transaction(self, lambda: self._extend(resource, owner, duration))

    def _extend(self, resource: str, owner: str, duration: timedelta) -> Renewed:
        header = self.rows.select_for_update(resource)
        if header is None or header.owner == "":
            return Renewed(row=None, exists=False, holder=None if header is None else "")
        expires_at = header.now + duration
        if header.held_by_shared:
            mine = self._hold_of(resource, owner, header.now)
            if mine is None:
                return Renewed(row=None, exists=True, holder=header.owner)
            hold = replace(mine, expires_at=expires_at)
            self.holds.update_hold(hold, ["expires_at"])
            self.grants.cover(header, expires_at)
            return Renewed(row=hold, exists=True)
        if not header.held or not same_owner(header.owner, owner):
            return Renewed(row=None, exists=True, holder=header.owner)
        row = replace(header, expires_at=expires_at)
        self.rows.update(row, ["expires_at"])
        return Renewed(row=row, exists=True)

    def _hold_of(self, resource: str, owner: str, now: datetime) -> LockRow | None:
        """``owner``'s shared hold of ``resource``, valid at ``now``."""
        return next(
            (
                hold
                for hold in self.holds.valid_holds(resource, now)
                if same_owner(hold.owner, owner)
            ),
            None,
        )

    def give_up(
        self,
        resource: str,
        owner: str | None,
        *,
        forced: bool = False,
        mode: str | None = None,
        queued: bool = False,
    ) -> Released:
        """Release ``owner``'s hold (one of its holds, when it has several,
        unless ``forced``); ``owner=None`` (forced): every hold, whoever holds
        it. Marks the resource's row released once nobody holds it
        (``mark_released``). ``mode``: the hold's, where its holder knows it
        (``LockHandle.mode``), so that a vendor goes straight to the statement
        that releases that kind of hold; ``queued``: the holder was handed the
        lock by a release (waiters are likely queued still), likewise. The
        decision depends on neither."""
        return self.give_up_portable(resource, owner, forced=forced)

    def give_up_portable(
        self, resource: str, owner: str | None, *, forced: bool = False
    ) -> Released:
        """``give_up`` as every database can, in a lock transaction."""
        return in_lock_transaction(self, lambda: self._give_up(resource, owner, forced))

    def _give_up(
        self, resource: str, owner: str | None, forced: bool, revoke: bool = False
    ) -> Released:
        """``give_up_portable``'s decision; ``revoke`` (``give_up_all``'s):
        revoke an unconfirmed grant as an operator's release does."""
        header = self.rows.select_for_update(resource)
        if header is None or not header.held:
            return Released(row=None, owner="", result=ReleaseResult.NOT_FOUND)
        if header.held_by_shared:
            return give_up_shared(self, header, owner, forced, revoke)
        if owner is not None and not same_owner(header.owner, owner):
            return Released(row=None, owner=header.owner, result=ReleaseResult.FORBIDDEN)
        if not forced and header.hold_count > 1:
            row = replace(header, hold_count=header.hold_count - 1)
            self.rows.update(row, ["hold_count"])
            return Released(row=row, owner=header.owner, result=ReleaseResult.DECREMENTED)
        # The row stays, expired and ownerless, to keep the fencing token counting.
        revoked_until = revoked(header) if forced or revoke else None
        if revoked_until is not None:
            # A hand-over's grant its head may not have started on: revoked,
            # and kept from others until its offer lease ends (``rules.grant``).
            row = replace(header, owner="", expires_at=revoked_until)
            self.rows.update(row, ["owner", "expires_at"])
        elif forced and header.lock_delay:  # (a zero delay, a grant's mark, is none)
            # An operator's, of a holder with a lock-delay: nobody takes it
            # until the delay ends, so neither does the head of the queue
            # (it looks again then).
            row = replace(header, owner="", expires_at=header.now)
            self.rows.update(row, ["owner", "expires_at"])
        else:  # the holder's own release leaves no delay behind
            row = replace(header, owner="", expires_at=header.now, lock_delay=None)
            self.mark_released(row)
        return Released(
            row=row, owner=header.owner, result=ReleaseResult.RELEASED, released=(header,)
        )

    def holders(self, resource: str) -> list[LockRow]:
        """The valid holds of ``resource``, oldest first (two reads, no lock: for display)."""
        header = self.tables.fetch_row(self.rows.read_sql, [resource])
        if header is None or not header.held:
            return []
        return self.holds.valid_holds(resource, header.now) if header.held_by_shared else [header]

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
            lambda: {name: self._give_up(name, owner, False, True) for name in sorted(resources)},
        )
        return [released[name] for name in resources]

    def mark_released(self, row: LockRow) -> None:
        """Write the released ``row`` (no owner, expired, no lock-delay) inside
        its lock transaction; a vendor also wakes the head of the resource's
        queue here."""
        self.rows.update(row, ["owner", "expires_at", "limit", "lock_delay"])

    def permit_freed(self, header: LockRow, held: list[LockRow]) -> None:
        """A release left a semaphore's ``header`` (as written, inside its lock
        transaction) with the valid holds ``held`` and a permit free: wake the
        head of the queue (a vendor may grant it the permit: ``shared_grants``)."""
        self.queue.wake_head(header.resource)

    def take_shared_grant(
        self, resource: str, owner: str, token: int | None, duration: timedelta
    ) -> LockRow | None:
        """The shared hold a release granted ``owner``'s waiter (``token``: its
        fencing token, as told) for ``duration`` from now, in a lock transaction;
        None where that hold is gone (``SharedGrants.accept``)."""
        accept = partial(self.shared_grants.accept, resource, owner, token, duration)
        return in_lock_transaction(self, accept)

    def granted(
        self,
        resource: str,
        owner: str,
        ticket: int,
        duration: timedelta,
        lock_delay: timedelta | None = None,
    ) -> LockRow | None:
        """The lock, if a release handed it to the waiter of ``ticket`` and its
        offer still stands (``Offers.take``); None where releases hand nothing
        over (``features.grants_on_release``)."""
        if not self.features.grants_on_release:
            return None
        return self.offers.take(resource, owner, ticket, duration, lock_delay)

    # -- the auto-renewer's batch, and the purge -------------------------------------

    def renew_many(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], Renewed]:
        """Extend each (resource, owner) hold that owner validly has to
        ``seconds`` from now; what each renewal did. The exclusive holders' in
        one statement per ``RENEW_CHUNK`` (in autocommit), then the shared
        holders' with their resources' rows (a lock transaction); a lost one's
        row is read (an UPDATE answers only the rows it wrote) to say why."""
        renewals = self.renewals
        renewed: dict[tuple[str, str], LockRow] = {}
        for start in range(0, len(pairs), RENEW_CHUNK):
            chunk = pairs[start : start + RENEW_CHUNK]
            renewed.update(renewals.renew_exclusive(chunk, seconds))
            shared = [pair for pair in chunk if pair not in renewed]
            if shared:
                renew = partial(renewals.renew_shared, shared, seconds)
                renewed.update(in_lock_transaction(self, renew))
        answers = {}
        for resource, owner in pairs:
            row = renewed.get((resource, owner))
            if row is None:  # lost (rare): whose row it is tells why
                row = self.tables.fetch_row(self.rows.read_sql, [resource])
                holder = None if row is None else row.owner
                answers[resource, owner] = Renewed(row=None, exists=bool(holder), holder=holder)
            else:
                answers[resource, owner] = Renewed(row=row, exists=True)
        return answers

    def purge_batch(self, *, older_than: float, batch_size: int, prefix: str) -> PurgedBatch:
        """Delete at most ``batch_size`` locks that expired at least ``older_than``
        seconds ago (and whose resource starts with ``prefix``), with their
        holds, and the expired holds of locks still held; in a lock transaction
        of its own."""
        return in_lock_transaction(self, lambda: self.purge.run(older_than, batch_size, prefix))

    # -- system checks -------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The system check messages about this database (Django's check
        arguments; see ``django_dlock.backends.checks``), by its vendor's
        ``checks_class``."""
        return self.checks_class(self.using).check(**kwargs)


class _NotAll(Exception):
    """An all-or-nothing acquisition found one lock it could not take."""

    def __init__(self, taken: list[Taken]) -> None:
        super().__init__("not all locks could be taken")
        self.taken = taken
