"""A release's told grant to readers and permits (issue 46): the release that
frees room (the lock released, or a permit) gives the waiters that fit their
shared holds itself, in its own transaction, and tells each in its wake-up
(``rules.notice``), as it gives the exclusive head the lock. Each starts on
its notice alone (``locking.told``), with no statement of its own.

Who fits is the admission rule read from the head of the queue (``IS_HEAD``)
onward: the head, if it wants a shared hold that ``MAY_JOIN`` beside the
holds left, then each waiter behind it that ``MAY_JOIN`` beside the head, the
waiters between the two counted as ahead of it (those granted too: they hold
once the release commits), as PostgreSQL's ``wake.fitting_sql`` reads it. A
writer between keeps every later reader out; a permit past the limit stops
the grants. Only a waiter that listens, says its ttl and answers
(``alive``) is granted: one that polls, or predates the ttl column, takes its
hold itself, and counts as ahead meanwhile.

Each hold is for the offer lease (``OFFER_LEASE``, or the ttl where
shorter) with a token of its own, above every earlier one: a granted waiter
that is not there to read its notice (paused, dead) keeps the others out for
that long only. The resource's row is marked as the exclusive grant's is
(``rules.grant``: its lock-delay ``GRANT_MARK``, its start the grant's), so
that an operator's release (or ``release_all``'s) of a hold before its waiter
could have started revokes it (``shared_release``) rather than freeing the
lock to a writer, or the permit to another, beside a waiter about to start.
A waiter told too late takes exactly the hold it was told of (``accept``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cached_property

from django_dlock.backends.grants import HEADER_WRITTEN
from django_dlock.backends.holds import Holds
from django_dlock.backends.lock_rows import LockRows
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.queue_row import to_timedelta
from django_dlock.backends.results import LockRow
from django_dlock.rules import EXCLUSIVE, SHARED, SHARED_HOLDERS, same_owner
from django_dlock.rules.grant import GRANT_MARK, OFFER_LEASE, revoked
from django_dlock.rules.notice import GrantNotice
from django_dlock.rules.predicates import may_join

__all__ = ["Granted", "SharedGrants"]

# The waiters a release reads from the head on, at most. Readers queued past
# them are neither granted nor woken by this release: they get in at their next
# look (the holds' expiry, or the periodic one), or at the next release.
READ_AT_MOST = 256


@dataclass(frozen=True)
class _Waiter:
    ticket: int
    channel: str
    owner: str
    ttl: timedelta | None
    mode: str
    limit: int | None
    label: str


@dataclass(frozen=True)
class Granted:
    """A waiter granted its hold: where to tell it, and what."""

    channel: str
    ticket: int
    notice: GrantNotice

    @property
    def payload(self) -> str:
        return self.notice.payload(self.ticket)


class SharedGrants:
    """The shared holds a release grants, on one alias (the portable writes)."""

    def __init__(self, rows: LockRows, holds: Holds, queue: WaiterQueue) -> None:
        self.rows = rows
        self.holds = holds
        self.queue = queue

    @cached_property
    def _queue_sql(self) -> str:
        """SELECT: the live waiters of a resource from a ticket on, in ticket order."""
        tables = self.queue.tables
        qn = tables.qn
        names = ("id", "channel", "owner", "ttl", "mode", "limit", "label")
        in_line = f"w.{qn('id')}"  # the queue's order (the head first: ``IS_HEAD``)
        return (
            f"SELECT {', '.join('w.' + qn(name) for name in names)} "  # noqa: S608
            f"FROM {tables.waiters_table} w WHERE w.{qn('resource')} = %s "
            f"AND w.{qn('id')} >= %s AND {self.queue.live_waiter_sql('w.')} "
            f"ORDER BY {in_line} LIMIT {READ_AT_MOST}"
        )

    def _waiters(self, resource: str, head: int) -> list[_Waiter]:
        with self.queue.tables.connection.cursor() as cursor:
            cursor.execute(self._queue_sql, [resource, head])
            rows = cursor.fetchall()
        return [
            _Waiter(int(t), c or "", o, to_timedelta(ttl), m, lim, lab or "")
            for t, c, o, ttl, m, lim, lab in rows
        ]

    def grant(
        self,
        header: LockRow,
        head: int,
        alive: Callable[[str], bool],
        held: list[LockRow] | None = None,
    ) -> list[Granted]:
        """Grant the waiters that fit from the head of the queue (``head``, its
        ticket, whose listener answered) their shared holds, beside ``held``
        (the valid holds left; None: the lock came free), writing the locked
        ``header`` (as the release left it) over; the waiters to tell. None
        granted (the head wants the lock exclusively, polls, has no ttl, or
        does not fit) writes nothing."""
        waiters = self._waiters(header.resource, head)
        if not waiters or waiters[0].ticket != head:
            return []
        holding = frozenset(hold.owner for hold in held or [])
        chosen = self._fitting(waiters, header, len(held or []), alive, holding)
        if not chosen:
            return []
        token, written = header.fencing_token, []
        for waiter in chosen:
            token += 1
            assert waiter.ttl is not None  # noqa: S101 - _fitting keeps those with one
            lease = min(waiter.ttl, timedelta(seconds=OFFER_LEASE))
            hold = self.holds.insert_hold(
                header.resource, waiter.owner, lease, token=token,
                label=waiter.label, limit=waiter.limit,
            )  # fmt: skip
            self.queue.leave_queue(waiter.ticket)
            notice = GrantNotice(hold.pk, token, hold.acquired_at, hold.expires_at)
            written.append((waiter, hold, notice))
        first = written[0][1]
        expires = max(hold.expires_at for _, hold, _ in written)
        if held:
            expires = max(expires, header.expires_at)
        self.rows.update(
            replace(
                header,
                owner=SHARED_HOLDERS,
                acquired_at=first.acquired_at,  # the grant's start (``rules.grant``)
                expires_at=expires,
                fencing_token=token,
                hold_count=len(held or []) + len(written),
                label="",
                limit=chosen[0].limit,
                lock_delay=GRANT_MARK,
            ),
            HEADER_WRITTEN,
        )
        return [Granted(waiter.channel, waiter.ticket, notice) for waiter, _, notice in written]

    def accept(
        self, resource: str, owner: str, token: int | None, duration: timedelta
    ) -> LockRow | None:
        """``LockBackend.take_shared_grant``'s, in its lock transaction: the hold
        granted ``owner``'s waiter, extended to ``duration`` from now. Only that
        hold (``_the_grant``): never another of the owner's, which would
        then be held by two who each think they hold it once."""
        header = self.rows.select_for_update(resource)
        if header is None or not header.held_by_shared:
            return None
        holds = self.holds.valid_holds(resource, header.now)
        mine = next((hold for hold in holds if same_owner(hold.owner, owner)), None)
        if mine is None or not _the_grant(header, mine, token):
            return None
        hold = replace(mine, expires_at=header.now + duration)
        self.holds.update_hold(hold, ["expires_at"])
        if hold.expires_at > header.expires_at:
            self.rows.update(replace(header, expires_at=hold.expires_at), ["expires_at"])
        return hold

    def _fitting(
        self,
        waiters: list[_Waiter],
        header: LockRow,
        held: int,
        alive: Callable[[str], bool],
        holding: frozenset[str] = frozenset(),
    ) -> list[_Waiter]:
        """The waiters to grant: the head, then those that may join beside it.
        One whose owner holds already (``holding``: an explicit owner's other
        hold) is not granted: a new hold would replace that one (one per owner),
        and it takes its own, one more of that hold."""
        head = waiters[0]
        if not _grantable(head, holding) or (held and head.limit != header.limit):
            return []  # (beside holds of another kind: a mismatch the head's take reports)
        if not may_join(head.limit, holders=held, ahead=0, writers_ahead=0):
            return []
        chosen = [head]
        for index, waiter in enumerate(waiters[1:], 1):
            between = waiters[1:index]
            writers = sum(1 for other in between if other.mode == EXCLUSIVE)
            if not may_join(
                head.limit, holders=held + 1, ahead=len(between), writers_ahead=writers
            ):
                break  # a writer ahead, or no permit left: nor for any later waiter
            # (One waiter per owner: a second hold of one owner would replace the first.)
            owners = holding.union(other.owner for other in chosen)
            if _grantable(waiter, owners) and waiter.limit == head.limit and alive(waiter.channel):
                chosen.append(waiter)
        return chosen


def _grantable(waiter: _Waiter, holding: frozenset[str]) -> bool:
    """Whether a release may grant ``waiter`` a shared hold: it wants one, listens,
    says its ttl, and its owner holds none of those ``holding``."""
    wants = waiter.mode == SHARED and waiter.channel != "" and waiter.ttl is not None
    return wants and waiter.owner not in holding


def _the_grant(header: LockRow, hold: LockRow, token: int | None) -> bool:
    """Whether ``hold`` is the one a release granted its owner's waiter: the
    one of ``token``, as its wake-up told it. Where no wake-up came (it went
    astray), one that is as a release grants it and nobody took since: one
    hold, for no more than the offer lease, younger than it, the resource
    marked as granted (``UNCONFIRMED``)."""
    if token is not None:
        return hold.fencing_token == token
    lease = hold.expires_at - hold.acquired_at
    unconfirmed = revoked(replace(hold, lock_delay=header.lock_delay)) is not None
    return hold.hold_count == 1 and lease <= timedelta(seconds=OFFER_LEASE) and unconfirmed
