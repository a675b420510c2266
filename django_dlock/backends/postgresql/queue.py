"""PostgreSQL's waiter queue: a ticket queued in the statement that counts who
is ahead, dead waiters told by their listener's server process, and the head
woken with ``NOTIFY`` (``postgresql.wake``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from django_dlock.backends.postgresql.prepared import Statement
from django_dlock.backends.postgresql.wake import (
    NO_TICKET_EXCLUDED,
    fitting_sql,
    head_sql,
    wake_sql,
)
from django_dlock.backends.queue import WANTS, WaiterQueue
from django_dlock.backends.queue_row import QueueRow
from django_dlock.backends.tickets import new_ticket_values, record_ticket, ticket_sql
from django_dlock.rules.claim import Claim

# A FROM item that makes the statement's own transaction (autocommit) commit
# without waiting for its WAL to reach the disk. For the waiter queue only: a
# ticket lost in a crash costs nothing (its waiter is gone too), and waiting for
# the flush of each ticket would cost the queue a disk write per turn.
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true) AS commit_mode"
ASYNC_COMMIT_CONDITION = "set_config('synchronous_commit', 'off', true) IS NOT NULL"


class PostgreSQLQueue(WaiterQueue):
    # -- waking the head of the queue ------------------------------------------------
    # A release NOTIFYs the channel of the head of the resource's queue (its
    # process's listener) with the head's ticket, and only when there is one:
    # NOTIFY takes a lock on the whole database's notification queue at commit,
    # which a release without waiters must not pay. The listener wakes that
    # waiter alone.

    #: Runs one of the backend's statements, prepared (``PostgreSQLBackend.run_statement``).
    run: Callable[[Statement, dict[str, Any]], Sequence[Any] | None]

    @cached_property
    def _enqueue(self) -> Statement:
        """The ticket's INSERT and the count of who is ahead, in one statement.

        FOR KEY SHARE of the lock row (when there is one) makes the INSERT wait
        for a release in flight, and a release wait for an INSERT in flight: a
        release either sees the ticket (and names it) or committed before the
        lock row was read here. (A locking read that waited returns the row as
        the release left it, though the statement's snapshot is older.) The
        queue ahead is counted in the same statement: one round trip, where an
        INSERT and then a look would take two, both on the path of a hand-over.
        Prepared, as the lock operations are: in the hot lock every turn queues
        a waiter, and planning this statement cost the server more than
        running it (docs/performance.md)."""
        tables = self.tables
        qn = tables.qn
        now = tables.sql_row.now
        names = ("id", "resource", "owner", "expires_at", *WANTS)
        values = ", ".join(f"%({name})s" for name in ("resource", "owner"))
        wants = ", ".join(f"%({name})s" for name in WANTS)
        ticket = ticket_sql(
            "postgresql", "%(ticket_step)s", "%(ticket_spread)s", "%(ticket_after)s"
        )
        return Statement(
            "enqueue",
            f"WITH held AS (SELECT {qn('owner')} AS owner, {qn('expires_at')} AS expires_at, "  # noqa: S608
            f"{qn('lock_delay')} AS lock_delay, {qn('limit')} AS lim FROM {tables.table} "
            f"WHERE {qn('resource')} = %(resource)s FOR KEY SHARE), "
            f"queued AS (INSERT INTO {tables.waiters_table} ({', '.join(qn(name) for name in names)}) "
            f"SELECT {ticket}, {values}, {tables.sql_row.plus(now, '%(wait)s')}, {wants} "
            f"FROM (SELECT COUNT(*) FROM held) locked, {ASYNC_COMMIT} RETURNING {qn('id')} AS id), "
            f"ahead AS ({self.queued_counts_sql('%(resource)s', '(SELECT id FROM queued)')}) "
            f"SELECT queued.id, held.owner, held.expires_at, held.lock_delay, {now}, ahead.n, "
            f"ahead.x, held.lim, ({self.holders_sql('%(resource)s')}), ahead.h "
            "FROM queued CROSS JOIN ahead LEFT JOIN held ON TRUE",
        )

    def enqueue_waiter(
        self, claim: Claim, seconds: float, *, channel: str = "", listener_pid: int | None = None
    ) -> tuple[int, QueueRow]:
        step, spread, after = new_ticket_values(claim.priority)
        wants = dict(zip(WANTS, self.wants(claim, channel, listener_pid), strict=True))
        params = {
            "resource": claim.resource,
            "owner": claim.owner,
            "wait": timedelta(seconds=seconds),
            "ticket_step": step,
            "ticket_spread": spread,
            "ticket_after": after,
            **wants,
        }
        answer = self.run(self._enqueue, params)
        assert answer is not None  # noqa: S101 - the INSERT always answers its row
        ticket, *state = answer
        record_ticket(claim.priority, int(ticket))
        return int(ticket), QueueRow.of(*state)

    def live_waiter_sql(self, alias: str = "") -> str:
        # A ticket whose listener's server process is gone is a dead waiter's:
        # killed, or its host lost (its connection then ends at the keepalive
        # timeout the listener sets).
        pid = f"{alias}{self.tables.qn('listener_pid')}"
        return (
            f"{super().live_waiter_sql(alias)} AND ({pid} IS NULL OR "
            f"EXISTS (SELECT FROM pg_stat_get_activity({pid})))"
        )

    def session_pid(self) -> int | None:
        connection = self.tables.connection
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (pid,) = cursor.fetchone()
        # Behind a pooler the server's process changes from one transaction to
        # the next (and is not the one the pooler reports): no such check then.
        raw = connection.connection
        reported = raw.info.backend_pid if hasattr(raw, "info") else raw.get_backend_pid()
        return int(pid) if pid == reported else None

    def wake_head(self, resource: str) -> None:
        # NOTIFY goes out when the transaction commits. The waiters that fit
        # beside the head (readers, the permits left free) are woken with it.
        sql = f"WITH head AS ({head_sql(self)}), {fitting_sql(self)} {wake_sql(readers=True)}"
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, [resource, NO_TICKET_EXCLUDED])

    def give_up_waiting(self, resource: str, ticket: int) -> bool:
        # Leaving without the lock while it is free: the next waiter would
        # otherwise wait for a release that already happened. A ticket that is
        # gone was handed the lock by a release (``handover``).
        tables = self.tables
        sql = (
            f"WITH gone AS (DELETE FROM {tables.waiters_table} WHERE {tables.qn('id')} = %s "  # noqa: S608
            f"AND {ASYNC_COMMIT_CONDITION} RETURNING 1), "
            f"head AS ({head_sql(self, self.unless_held_sql())}), {fitting_sql(self)} "
            f"SELECT (SELECT COUNT(*) FROM gone), ({wake_sql(readers=True)})"
        )
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, [ticket, resource, ticket, resource])
            (queued, _) = cursor.fetchone()
        return bool(queued)
