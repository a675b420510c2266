"""PostgreSQL's SQL for the lock operations."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING

from django.db.models.expressions import RawSQL

from django_dlock.backends.base import LockBackend
from django_dlock.backends.clock import DatabaseNow, compile_expression, now_plus

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock


def channel_for(resource: str) -> str:
    """The ``LISTEN`` channel of ``resource``'s waiters: a hash, since channel
    names are identifiers of at most 63 bytes (the payload, a ticket, tells
    resources that share one apart)."""
    return "dlock_" + hashlib.sha256(resource.encode()).hexdigest()[:32]


class PostgreSQLBackend(LockBackend):
    vendor = "postgresql"

    def purge_batch(self, *, older_than: float, batch_size: int, prefix: str) -> int:
        # The batch is chosen by physical row address (ctid): a TID scan reaches
        # each row without an index lookup, where "id IN (subquery)" is planned as
        # a full scan per batch. A row updated meanwhile (renewed, re-acquired) has
        # a new ctid and a new expiry, so the DELETE skips it. The database counts
        # the batch and takes its largest token, instead of sending every deleted
        # token back. Together: about half the time per batch.
        rows = (
            self._purge_candidates(older_than, prefix)
            .annotate(row=RawSQL("ctid", ()))
            .values("row")[:batch_size]
        )
        rows_sql, rows_params = rows.query.get_compiler(using=self.using).as_sql()
        where_sql, where_params = self._still_expired_sql(older_than)
        token = self.qn("fencing_token")
        sql = (
            f"WITH purged AS (DELETE FROM {self.table} "  # noqa: S608 - only compiled SQL is formatted in
            f"WHERE ctid = ANY(ARRAY({rows_sql})) AND {where_sql} RETURNING {token}) "
            f"SELECT COUNT(*), MAX({token}) FROM purged"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [*rows_params, *where_params])
            count, largest = cursor.fetchone()
        if count:
            self._raise_fencing_floor(largest)
        return int(count)

    # -- waking the head of the queue ------------------------------------------------
    # A release NOTIFYs the resource's channel with the ticket of the head of its
    # queue, and only when there is one: NOTIFY takes a lock on the whole
    # database's notification queue at commit, which a release without waiters
    # must not pay. The listener of the head's process wakes that waiter alone.

    def enqueue_waiter(self, resource: str, owner: str, seconds: float) -> int:
        # FOR KEY SHARE of the lock row (when there is one) makes the INSERT wait
        # for a release in flight, and a release wait for an INSERT in flight: a
        # release either sees the ticket (and names it) or committed before the
        # waiter's next look (which then sees the lock free).
        qn = self.qn
        expires_sql, expires_params = compile_expression(
            self.using, now_plus(timedelta(seconds=seconds))
        )
        sql = (
            f"INSERT INTO {self.waiters_table} ({qn('resource')}, {qn('owner')}, "  # noqa: S608
            f"{qn('expires_at')}) SELECT %s, %s, {expires_sql} FROM (SELECT COUNT(*) FROM "
            f"(SELECT 1 FROM {self.table} WHERE {qn('resource')} = %s FOR KEY SHARE) held) "
            f"locked, {ASYNC_COMMIT} RETURNING {qn('id')}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [resource, owner, *expires_params, resource])
            (ticket,) = cursor.fetchone()
        return int(ticket)

    def mark_released(self, lock: DistributedLock) -> None:
        qn = self.qn
        values = [
            self.fields[name].get_db_prep_save(getattr(lock, name), self.connection)
            for name in ("owner", "expires_at")
        ]
        sql = (
            f"WITH head AS ({self._head_sql()}) UPDATE {self.table} "  # noqa: S608
            f"SET {qn('owner')} = %s, {qn('expires_at')} = %s WHERE {self.pk_column} = %s "
            f"RETURNING (SELECT COUNT(*) FROM head, LATERAL pg_notify(%s, head.id::text))"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(
                sql,
                [lock.resource, NO_TICKET_EXCLUDED, *values, lock.pk, channel_for(lock.resource)],
            )

    def give_up_waiting(self, resource: str, ticket: int) -> None:
        # Leaving without the lock while it is free: the next waiter would
        # otherwise wait for a release that already happened.
        qn = self.qn
        now_sql, _ = compile_expression(self.using, DatabaseNow())
        held = (
            f"SELECT 1 FROM {self.table} l WHERE l.{qn('resource')} = %s "  # noqa: S608
            f"AND l.{qn('owner')} <> '' AND l.{qn('expires_at')} > {now_sql}"
        )
        sql = (
            f"WITH gone AS (DELETE FROM {self.waiters_table} WHERE {qn('id')} = %s "  # noqa: S608
            f"AND {ASYNC_COMMIT_CONDITION}), "
            f"head AS ({self._head_sql(f'AND NOT EXISTS ({held})')}) "
            f"SELECT COUNT(*) FROM head, LATERAL pg_notify(%s, head.id::text)"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [ticket, resource, ticket, resource, channel_for(resource)])

    def _head_sql(self, condition: str = "") -> str:
        """The live waiter first in line for ``%s`` (a resource), other than ``%s``
        (a ticket), if ``condition`` (SQL) holds."""
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        assert not now_params  # noqa: S101 - DatabaseNow() is plain SQL
        return (
            f"SELECT w.{qn('id')} AS id FROM {self.waiters_table} w "  # noqa: S608
            f"WHERE w.{qn('resource')} = %s AND w.{qn('id')} <> %s "
            f"AND w.{qn('expires_at')} > {now_sql} {condition} ORDER BY w.{qn('id')} LIMIT 1"
        )

    @cached_property
    def waiters_table(self) -> str:
        return self.qn(self.waiter_model._meta.db_table)


# No waiter has this ticket: mark_released() excludes none from the head.
NO_TICKET_EXCLUDED = 0
# A FROM item that makes the statement's own transaction (autocommit) commit
# without waiting for its WAL to reach the disk. For the waiter queue only: a
# ticket lost in a crash costs nothing (its waiter is gone too), and waiting for
# the flush of each ticket would cost the queue a disk write per turn.
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true) AS commit_mode"
ASYNC_COMMIT_CONDITION = "set_config('synchronous_commit', 'off', true) IS NOT NULL"
