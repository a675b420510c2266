"""The queue of waiters of ``lock()``: one row per waiting call, its ticket.

A waiter queues once, looks at the lock row and at how many live waiters are
ahead of it, and tries to take the lock when it is the head (``locking/waiting.py``).
Its process refreshes the row while it waits, so a crashed waiter's row expires
and is dropped. These statements are the same on every vendor; a vendor
overrides the ones it answers with fewer statements or uses to wake the head.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from typing import Any

from django_dlock.backends.queue_row import QueueRow
from django_dlock.backends.tables import LockTables
from django_dlock.backends.tickets import NO_TICKET, new_ticket_sql, record_ticket
from django_dlock.backends.transactions import TransactionHooks
from django_dlock.django_private import compile_expression
from django_dlock.rules import EXCLUSIVE
from django_dlock.rules.claim import Claim
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.predicates import HELD, IS_HEAD, first_in_line, head_ticket

# The columns of a ticket that say what its waiter wants and how to reach it (``WaiterQueue.wants``).
WANTS = ("channel", "ttl", "mode", "limit", "label", "listener_pid")


class WaiterQueue:
    """The statements of one alias's waiter queue; a vendor overrides the ones
    it answers with fewer statements or uses to wake the head."""

    def __init__(self, tables: LockTables, transactions: TransactionHooks) -> None:
        self.tables = tables
        #: The backend's lock transactions, for a vendor whose queue writes run
        #: in one (SQLite).
        self.transactions = transactions

    @cached_property
    def queue_state_sql(self) -> str:
        """The SELECT of ``queue_state`` for a waiter not queued yet."""
        return self._queue_state_sql(ticket_queued="")

    @cached_property
    def ticket_state_sql(self) -> str:
        """The SELECT of ``queue_state`` for a queued waiter: also whether its
        ticket is still queued: there, and not lapsed. A waiter whose ticket
        was dropped or lapsed meanwhile queues again, at the back
        (``Wait.step``). (One that only stopped counting for a while, its
        listener reconnecting, keeps it: the listener names it again,
        ``listeners.postgresql``.) The first look, without a ticket, has the
        SELECT without it: there the check would only add to the planning
        (docs/performance.md, "Where the code's choices come from")."""
        live = WaiterQueue.live_waiter_sql(self, "m.")
        return self._queue_state_sql(ticket_queued=f", {self.ticket_counts_sql(live=live)}")

    def ticket_counts_sql(self, ticket: str = "%s", *, live: str = "") -> str:
        """SQL: whether the waiter of ``ticket`` (SQL: a placeholder) is still
        queued and counts (``live_waiter_sql``; or ``live``, SQL of the table
        alias ``m``). A ticket that lapsed (its waiter stopped refreshing it:
        paused, or stuck in the database past its deadline) no longer counts,
        even while its row is left: others passed it, so its waiter must not
        take the lock on it."""
        waiters, pk = self.tables.waiters_table, self.tables.qn("id")
        return (
            f"EXISTS (SELECT 1 FROM {waiters} m WHERE m.{pk} = {ticket} "  # noqa: S608
            f"AND {live or self.live_waiter_sql('m.')})"
        )

    def ticket_counts(self, ticket: int, *, head_of: str | None = None) -> bool:
        """Whether the waiter of ``ticket`` is still queued (``ticket_counts_sql``),
        and, with ``head_of`` (a resource), heads its queue (``ticket_heads_sql``):
        asked in the acquisition's transaction, once the row is locked."""
        with self.tables.connection.cursor() as cursor:
            if head_of is None:
                cursor.execute(f"SELECT {self.ticket_counts_sql()}", [ticket])
            else:
                cursor.execute(f"SELECT {self.ticket_heads_sql}", [ticket, head_of, ticket])
            return bool(cursor.fetchone()[0])

    @cached_property
    def ticket_heads_sql(self) -> str:
        """``ticket_heads`` with placeholders: the ticket, the resource, the ticket."""
        return self.ticket_heads()

    def ticket_heads(self, ticket: str = "%s", resource: str = "%s") -> str:
        """SQL: the waiter of ``ticket`` still counts, and no live waiter of
        ``resource`` is queued before it (``IS_HEAD``); both SQL. An exclusive
        waiter's take decides that it is the head under the row's lock, rather
        than trusting its last look (a waiter of a higher priority may have
        queued ahead since)."""
        ahead = f"(SELECT COUNT(*) {self.queued_before_sql(resource, ticket)})"
        is_head = IS_HEAD.sql(self.tables.sql_row.spelling(ahead=ahead))
        return f"{self.ticket_counts_sql(ticket)} AND {is_head}"

    def nobody_queued(self, resource: str = "%s") -> str:
        """SQL: no live waiter of ``resource`` (SQL) is queued, so a claim without
        a ticket heads the queue (``IS_HEAD``): ``Claim.behind_queue``'s take."""
        ahead = f"(SELECT COUNT(*) {self.queued_before_sql(resource, str(NO_TICKET))})"
        return str(IS_HEAD.sql(self.tables.sql_row.spelling(ahead=ahead)))

    def _queue_state_sql(self, ticket_queued: str) -> str:
        # Waiters run this in a loop, so it is one hand-written SELECT rather than
        # ORM queries, which cost more to build than to run.
        qn = self.tables.qn
        now_sql, now_params = compile_expression(self.tables.using, DatabaseNow())
        assert not now_params  # noqa: S101 - DatabaseNow() is plain SQL
        # A one-row SELECT of the queue's counts, LEFT JOINed to the lock row (there
        # is none before the first acquisition of the resource).
        # Table and column names only; the values are parameters.
        return (
            f"SELECT l.{qn('owner')}, l.{qn('expires_at')}, l.{qn('lock_delay')}, "  # noqa: S608
            f"{now_sql}, q.n, q.x, "
            f"l.{qn('limit')}, ({self.holders_sql()}), q.h{ticket_queued} "
            f"FROM ({self.queued_counts_sql('%s', '%s')}) q "
            f"LEFT JOIN {self.tables.table} l ON l.{qn('resource')} = %s"
        )

    def queued_counts_sql(self, resource: str, ticket: str) -> str:
        """SQL: one row, how many live waiters of ``resource`` queue before
        ``ticket`` (``n``), how many of those want the lock exclusively (``x``),
        and the head's ticket (``h``); both SQL (a placeholder, a column)."""
        qn = self.tables.qn
        return (
            f"SELECT COUNT(*) AS n, COALESCE(SUM(CASE WHEN w.{qn('mode')} = '{EXCLUSIVE}' "
            f"THEN 1 ELSE 0 END), 0) AS x, {head_ticket('w.' + qn('id'))} AS h "
            f"{self.queued_before_sql(resource, ticket)}"
        )

    def queued_before_sql(
        self, resource: str, ticket: str, *, after: str = "", alias: str = "w"
    ) -> str:
        """SQL: FROM and WHERE of the live waiters (table alias ``alias``) of
        ``resource`` that queue before ``ticket`` (and after the ticket
        ``after``); each SQL (a placeholder, a column)."""
        qn = self.tables.qn
        after_sql = f"AND {alias}.{qn('id')} > {after} " if after else ""
        return (
            f"FROM {self.tables.waiters_table} {alias} WHERE {alias}.{qn('resource')} = {resource} "
            f"AND {alias}.{qn('id')} < {ticket} {after_sql}AND {self.live_waiter_sql(alias + '.')}"
        )

    def live_waiter_sql(self, alias: str = "") -> str:
        """SQL: the waiter (of the table alias ``alias``, with its dot) still
        counts: its ticket has not expired. A vendor that can tell a dead
        waiter sooner says so too."""
        now_sql, _ = compile_expression(self.tables.using, DatabaseNow())
        return f"{alias}{self.tables.qn('expires_at')} > {now_sql}"

    def holders_sql(self, resource: str = "%s") -> str:
        """SQL: the number of valid shared holds of ``resource`` (SQL: a
        placeholder, or a column)."""
        qn = self.tables.qn
        now_sql, _ = compile_expression(self.tables.using, DatabaseNow())
        return (
            f"SELECT COUNT(*) FROM {self.tables.holds_table} h "  # noqa: S608
            f"WHERE h.{qn('resource')} = {resource} AND h.{qn('expires_at')} > {now_sql}"
        )

    def head_sql(
        self,
        columns: str,
        condition: str = "",
        *,
        resource: str = "%s",
        ticket: str = "",
        locked: bool = False,
    ) -> str:
        """SQL: ``columns`` (of the table alias ``w``) of the head of the queue
        of ``resource`` (``IS_HEAD``), other than ``ticket`` (SQL; "" for none),
        if ``condition`` (SQL, ``AND ...``) holds. ``locked``: read ``FOR
        UPDATE``, which skips a waiter whose ticket went while the statement ran."""
        qn = self.tables.qn
        other = f"AND w.{qn('id')} <> {ticket} " if ticket else ""
        return (
            f"SELECT {columns} FROM {self.tables.waiters_table} w "  # noqa: S608
            f"WHERE w.{qn('resource')} = {resource} {other}AND {self.live_waiter_sql('w.')} "
            f"{condition} {first_in_line('w.' + qn('id'))}{' FOR UPDATE OF w' if locked else ''}"
        )

    def unless_held_sql(self) -> str:
        """SQL, a condition of ``head_sql``: the lock of the resource (a placeholder) is not ``HELD``."""
        qn, held = self.tables.qn, HELD.sql(self.tables.sql_row.aliased("l."))
        table = self.tables.table
        return f"AND NOT EXISTS (SELECT 1 FROM {table} l WHERE l.{qn('resource')} = %s AND {held})"  # noqa: S608

    def head_channel(self, resource: str) -> str:
        """The channel of the live waiter first in line for ``resource``: the
        one a release wakes ("" for no waiter, or a head that polls). One
        SELECT: a leader's observer listens there too (``django_dlock.leaders``)."""
        with self.tables.connection.cursor() as cursor:
            cursor.execute(self.head_sql(f"w.{self.tables.qn('channel')}"), [resource])
            row = cursor.fetchone()
        return "" if row is None else str(row[0])

    def queue_state(self, resource: str, ticket: int | None) -> QueueRow:
        """One statement, no transaction: the lock row, how many live waiters
        are queued before ``ticket`` (all of them when ``ticket`` is None), and
        whether ``ticket`` is still queued."""
        with self.tables.connection.cursor() as cursor:
            sent = time.monotonic()
            if ticket is None:
                cursor.execute(self.queue_state_sql, [resource, resource, NO_TICKET, resource])
            else:
                sql = self.ticket_state_sql
                cursor.execute(sql, [resource, ticket, resource, ticket, resource])
            return replace(QueueRow.of(*cursor.fetchone()), sent=sent)

    def queued_before(self, resource: str, ticket: int | None) -> tuple[int, int]:
        """How many live waiters of ``resource`` queued before ``ticket`` (all,
        without one), and how many of them want it exclusively (in the
        acquisition's lock transaction)."""
        with self.tables.connection.cursor() as cursor:
            cursor.execute(
                f"SELECT n, x FROM ({self.queued_counts_sql('%s', '%s')}) q",  # noqa: S608
                [resource, ticket or NO_TICKET],
            )
            everyone, exclusive = cursor.fetchone()
        return int(everyone), int(exclusive)

    def enqueue_waiter(
        self, claim: Claim, seconds: float, *, channel: str = "", listener_pid: int | None = None
    ) -> tuple[int, QueueRow]:
        """Queue a waiter of ``claim`` for ``seconds`` (unless refreshed), to be
        woken on ``channel`` ("" polls) through the listener connection whose
        server process is ``listener_pid``; its ticket, and the queue as seen
        once the ticket is in it. An INSERT in autocommit (no transaction of its
        own to wait for), then ``queue_state``."""
        qn = self.tables.qn
        expires_sql, expires_params = self.tables.from_now(seconds)
        names = ("id", "resource", "owner", "expires_at", *WANTS)
        ticket_sql, ticket_params = self.ticket_sql(claim.priority)
        # Only quoted identifiers and Django-compiled SQL are formatted in.
        sql = (
            f"INSERT INTO {self.tables.waiters_table} ({', '.join(qn(name) for name in names)}) "  # noqa: S608
            f"VALUES ({ticket_sql}, %s, %s, {expires_sql}, {', '.join(['%s'] * len(WANTS))})"
        )
        wants = self.wants(claim, channel, listener_pid)
        params = [*ticket_params, claim.resource, claim.owner, *expires_params, *wants]
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, params)
            ticket = int(cursor.lastrowid)
        record_ticket(claim.priority, ticket)
        return ticket, self.queue_state(claim.resource, ticket)

    def ticket_sql(self, priority: int) -> tuple[str, list[Any]]:
        """SQL and parameters of a new ticket of ``priority`` (``backends.tickets``)."""
        return new_ticket_sql(self.tables.connection.vendor, priority)

    def wants(self, claim: Claim, channel: str, listener_pid: int | None) -> list[Any]:
        """A ticket's ``WANTS``, as parameters."""
        mode = claim.kind.mode
        ttl = self._ttl_value(claim.duration)
        return [channel, ttl, mode, claim.kind.limit, claim.label, listener_pid]

    def refresh_waiters(self, tickets: Sequence[int], seconds: float) -> None:
        """Keep the waiters of ``tickets`` queued for ``seconds`` more (one
        UPDATE). A ticket that lapsed stays lapsed: the others passed it, and
        its waiter queues again at the back (``Wait.step``)."""
        qn = self.tables.qn
        expires_sql, expires_params = self.tables.from_now(seconds)
        ids = ", ".join(["%s"] * len(tickets))
        sql = (
            f"UPDATE {self.tables.waiters_table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
            f"WHERE {qn('id')} IN ({ids}) AND {WaiterQueue.live_waiter_sql(self)}"
        )
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, [*expires_params, *tickets])

    def leave_queue(self, ticket: int) -> bool:
        """Drop the waiter that took the lock (inside its lock transaction);
        whether its ticket was still there."""
        # The next holder runs this in a hand-over: hand-written, as the ORM's
        # delete() (a Collector) costs more than the statement itself.
        with self.tables.connection.cursor() as cursor:
            cursor.execute(self.leave_sql, [ticket])
            return bool(cursor.rowcount == 1)

    @cached_property
    def leave_sql(self) -> str:
        """The DELETE of a ticket (a placeholder)."""
        tables = self.tables
        return f"DELETE FROM {tables.waiters_table} WHERE {tables.qn('id')} = %s"  # noqa: S608

    @cached_property
    def leave_counted_sql(self) -> str:
        """The DELETE of a ticket (a placeholder) that still counts
        (``live_waiter_sql``, at the DELETE's own time): a take that waited for
        the row in one statement learns here whether the ticket lapsed meanwhile."""
        return f"{self.leave_sql} AND {self.live_waiter_sql()}"

    def give_up_waiting(self, resource: str, ticket: int) -> bool:
        """Drop a waiter that leaves without the lock (timed out, cancelled);
        whether its ticket was still queued (if not, a release may have handed
        it the lock: ``LockBackend.granted``)."""
        return self.leave_queue(ticket)

    def wake_head(self, resource: str) -> None:
        """Wake the head of ``resource``'s queue, once this lock transaction
        commits, to look at the lock now (a permit came free, or a waiter was
        admitted beside others). Waiters that nothing wakes poll."""

    def wait_for_release(
        self, resource: str, holder: str, seconds: float, own: str = ""
    ) -> bool | None:
        """Block up to ``seconds`` until ``holder`` releases ``resource``, holding
        ``own``'s gate (``features.waits_for_release``): whether it did; None: unknown."""
        return None

    def owner_ahead(self, resource: str, ticket: int) -> str | None:
        """The owner of the live waiter just before ``ticket`` (MariaDB's gates)."""
        return None

    def leave_gate(self, resource: str, owner: str) -> None:
        """Give up the gate ``wait_for_release`` held for ``owner``."""

    def session_pid(self) -> int | None:
        """The server's id of this thread's connection, when the database can
        tell whether a connection of that id lives (``live_waiter_sql``): a
        polling waiter's ticket carries it."""
        return None

    def prune_ahead(self, resource: str, ticket: int) -> None:
        """Drop the tickets queued before ``ticket`` whose waiters are known to
        be dead, where the backend can tell sooner than their expiry
        (``live_waiter_sql`` tells where the database can)."""

    def drop_dead_waiters(self, resource: str) -> None:
        """Delete the rows of waiters of ``resource`` that stopped refreshing them."""
        tables = self.tables
        tables.waiter_model._default_manager.using(tables.using).filter(
            resource=resource, expires_at__lte=DatabaseNow()
        ).delete()

    def _ttl_value(self, ttl: timedelta | None) -> Any:
        """``ttl`` as the driver takes a ``DurationField`` (SQLite: microseconds)."""
        field = self.tables.waiter_model._meta.get_field("ttl")
        return field.get_db_prep_save(ttl, self.tables.connection)  # type: ignore[union-attr]
