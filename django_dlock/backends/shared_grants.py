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

Each hold is for the offer lease (``HANDOVER_LEASE``, or the ttl where
shorter) with a token of its own, above every earlier one: a granted waiter
that is not there to read its notice (paused, dead) keeps the others out for
that long only. The resource's row is marked as the exclusive grant's is
(``rules.grant``: its lock-delay ``GRANT_MARK``, its start the grant's), so
that an operator's release of every hold before the waiters could have
started revokes them (``shared_release``) rather than freeing the lock to a
writer beside a reader about to start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cached_property

from django_dlock.backends.grants import HEADER_WRITTEN
from django_dlock.backends.holds import Holds
from django_dlock.backends.lock_rows import LockRows
from django_dlock.backends.queue import HANDOVER_LEASE, WaiterQueue, _to_timedelta
from django_dlock.backends.results import LockRow
from django_dlock.rules import EXCLUSIVE, SHARED, SHARED_HOLDERS
from django_dlock.rules.grant import GRANT_MARK
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
            _Waiter(int(t), c or "", o, _to_timedelta(ttl), m, lim, lab or "")
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
        chosen = self._fitting(waiters, header, len(held or []), alive)
        if not chosen:
            return []
        token, written = header.fencing_token, []
        for waiter in chosen:
            token += 1
            assert waiter.ttl is not None  # noqa: S101 - _fitting keeps those with one
            lease = min(waiter.ttl, timedelta(seconds=HANDOVER_LEASE))
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

    def _fitting(
        self, waiters: list[_Waiter], header: LockRow, held: int, alive: Callable[[str], bool]
    ) -> list[_Waiter]:
        """The waiters to grant: the head, then those that may join beside it."""
        head = waiters[0]
        if not _grantable(head) or (held and head.limit != header.limit):
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
            if _grantable(waiter) and waiter.limit == head.limit and alive(waiter.channel):
                chosen.append(waiter)
        return chosen


def _grantable(waiter: _Waiter) -> bool:
    """Whether a release may grant ``waiter`` a shared hold: it wants one, listens, says its ttl."""
    return waiter.mode == SHARED and waiter.channel != "" and waiter.ttl is not None
