"""PostgreSQL's SQL for the lock operations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from django.db.models.expressions import RawSQL

from django_dlock.backends.base import Found, LockBackend, Written
from django_dlock.backends.clock import DatabaseNow, compile_expression
from django_dlock.backends.postgresql.prepared import PreparedStatements, Statement
from django_dlock.backends.queue import QueueRow

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock


class PostgreSQLBackend(LockBackend):
    """Each lock operation is one statement and one round trip: a CTE locks the
    resource's row (``SELECT ... FOR UPDATE``), and the write that the row allows
    joins it, judged on the values the lock returned. The decision is written
    in SQL, in the write's ``WHERE``; ``STATEMENT_TIMESTAMP()`` is the
    database's now.

    The statement runs in the manager's ``atomic()`` block, as the manager's own
    statements would, and when that block is the outermost one, it is sent in
    autocommit (see ``_run``): the server's transaction is the statement's own,
    and BEGIN and COMMIT need no round trips of their own, where SELECT, decide,
    write and COMMIT took four.
    """

    vendor = "postgresql"
    listener_class = "django_dlock.listeners.postgresql.PostgresListener"

    def __init__(self, using: str) -> None:
        super().__init__(using)
        # Built and tested with psycopg 3's client-side binding (Django's
        # default); otherwise the manager's statements run. (Imported here: this
        # module is also imported where no driver is installed.)
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        options = self.connection.settings_dict.get("OPTIONS") or {}
        self.fuses_operations = is_psycopg3 and not options.get("server_side_binding")
        # Only quoted identifiers and Django-compiled SQL are formatted in; values
        # are parameters. Written once per alias: this is the hot path.
        c, table = self.column_sql, self.table
        now, _ = compile_expression(using, DatabaseNow())
        row = f"{', '.join(self.columns)}, {now}"  # the lock's columns and db_now

        def valid_in(alias: str = "") -> str:
            """SQL: the row (of ``alias``, a table alias and dot) has a holder now."""
            return f"{alias}{c['owner']} <> '' AND {alias}{c['expires_at']} > {now}"

        # Each operation is one statement, which locks the resource's row (a
        # FOR UPDATE CTE, ``locked``) and writes only that row, judged on the
        # values the lock returned: one snapshot, so the write never meets a row
        # that the lock did not see. (As two statements, an UPDATE's newer
        # snapshot could find a row inserted and committed between them and
        # write it unjudged: a force-release reported "nothing released" while it
        # released a new holder's lock.) Its one row: the locked row's owner and
        # whether it was held, then the row as written (NULL where there was none).
        locked = (
            f"WITH locked AS (SELECT {row} AS db_now "  # noqa: S608
            f"FROM {table} WHERE {c['resource']} = %(resource)s FOR UPDATE)"
        )
        after = ", ".join(f"{table}.{name}" for name in self.columns)
        held = valid_in("locked.")
        answer = (
            f"SELECT locked.{c['owner']}, {held}, written.* "  # noqa: S608
            "FROM (SELECT) one LEFT JOIN locked ON TRUE"
        )

        def decide_and_write(
            assignments: str, condition: str, ctes: str = "", woken: str = ""
        ) -> str:
            return (
                f"{locked}{ctes}, written AS (UPDATE {table} SET {assignments} FROM locked "  # noqa: S608
                f"WHERE {table}.{self.pk_column} = locked.{self.pk_column} AND {condition} "
                f"RETURNING {after}, {now}{woken}) {answer} LEFT JOIN written ON TRUE"
            )

        # Acquire. Free (released or expired): a new holder and a larger token.
        # Held by the same owner: a later expiry, the same token and acquired_at.
        # Held by another: no write.
        def free_for_owner(alias: str) -> str:
            return f"NOT ({valid_in(alias)} AND {alias}{c['owner']} <> %(owner)s)"

        mine = f"{table}.{c['owner']} = %(owner)s AND {table}.{c['expires_at']} > {now}"
        take = (
            f"{c['owner']} = %(owner)s, {c['acquired_at']} = "
            f"CASE WHEN {mine} THEN {table}.{c['acquired_at']} ELSE {now} END, "
            f"{c['expires_at']} = {now} + %(duration)s, {c['fencing_token']} = "
            f"CASE WHEN {mine} THEN {table}.{c['fencing_token']} "
            f"ELSE {table}.{c['fencing_token']} + 1 END"
        )
        # Without a row, the first acquisition inserts it, its token above the
        # largest ever purged. A row that another acquisition inserted and
        # committed meanwhile (invisible to this statement's snapshot) is a
        # conflict: ON CONFLICT waits for it, locks it, and judges it as it is.
        # Only when the snapshot has no row: one that a purge deleted while the
        # lock waited for it is gone from ``locked``, but the snapshot predates
        # the purge's raise of the floor (``take`` looks again).
        no_row = (
            f"NOT EXISTS (SELECT FROM locked) AND NOT EXISTS "  # noqa: S608
            f"(SELECT FROM {table} WHERE {c['resource']} = %(resource)s)"
        )
        insert = (
            f"INSERT INTO {table} ({c['resource']}, {c['owner']}, {c['acquired_at']}, "  # noqa: S608
            f"{c['expires_at']}, {c['fencing_token']}) "
            f"SELECT %(resource)s, %(owner)s, {now}, {now} + %(duration)s, "
            f"COALESCE((SELECT MAX({self.qn('value')}) FROM {self.floor_table}), 0) + 1 "
            f"WHERE {no_row} ON CONFLICT ({c['resource']}) "
            f"DO UPDATE SET {take} WHERE {free_for_owner(f'{table}.')} RETURNING {after}, {now}"
        )
        update = (
            f"UPDATE {table} SET {take} FROM locked "  # noqa: S608
            f"WHERE {table}.{self.pk_column} = locked.{self.pk_column} "
            f"AND {free_for_owner('locked.')} RETURNING {after}, {now}"
        )
        taken = (
            f"{locked}, updated AS ({update}), inserted AS ({insert}), "  # noqa: S608
            "written AS (SELECT * FROM updated UNION ALL SELECT * FROM inserted)"
        )
        self._take = Statement("take", f"{taken} {answer} LEFT JOIN written ON TRUE")
        # lock()'s waiter that takes the lock leaves its queue in the same statement.
        self._take_leaving = Statement(
            "take_leaving",
            f"{taken}, dequeued AS (DELETE FROM {self.waiters_table} "  # noqa: S608
            f"WHERE {self.qn('id')} = %(ticket)s AND EXISTS (SELECT FROM written)) "
            f"{answer} LEFT JOIN written ON TRUE",
        )

        owned = f"{held} AND locked.{c['owner']} = %(owner)s"
        # The row stays, expired and ownerless, to keep the fencing token counting;
        # the head of the resource's waiter queue, if any, is woken (mark_released).
        head = self._head_sql(resource="%(resource)s", ticket=str(NO_TICKET_EXCLUDED))
        release = {
            "assignments": f"{c['owner']} = '', {c['expires_at']} = {now}",
            "ctes": f", head AS ({head})",
            "woken": f", ({WAKE_HEAD})",
        }
        self._extend = Statement(
            "extend", decide_and_write(f"{c['expires_at']} = {now} + %(duration)s", owned)
        )
        self._release = Statement("release", decide_and_write(condition=owned, **release))
        self._force_release = Statement(
            "force_release", decide_and_write(condition=held, **release)
        )
        self._prepared = PreparedStatements(using)

    def can_listen(self) -> bool:
        # psycopg2 has no notify handlers.
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return False
        return True

    def take(
        self, resource: str, owner: str, duration: timedelta, *, leaving: int | None = None
    ) -> Written:
        params = {"resource": resource, "owner": owner, "duration": duration, "ticket": leaving}
        statement = self._take if leaving is None else self._take_leaving
        written = self._decided(statement, params)
        if written.before is None and written.after is None:
            # The row vanished (purged while the lock waited for it), or it
            # appeared after the statement's snapshot, held by another owner: in
            # either case a statement with a new snapshot sees it as it is now.
            written = self._decided(statement, params)
        return written

    def extend(self, resource: str, owner: str, duration: timedelta) -> Written:
        params = {"resource": resource, "owner": owner, "duration": duration}
        return self._decided(self._extend, params)

    def give_up(self, resource: str, owner: str | None) -> Written:
        params = {"resource": resource, "owner": owner}
        return self._decided(self._release if owner is not None else self._force_release, params)

    def _decided(self, statement: Statement, params: dict[str, Any]) -> Written:
        """Run one operation's statement: its row holds the locked row's owner
        and whether it was held, then the row as written (with db_now); NULL
        where there was no row, or no write."""
        owner, held, *after = self._run(statement, params)
        before = None if owner is None else Found(owner=owner, held=bool(held))
        return Written(before=before, after=self._lock(after if after[0] is not None else None))

    def _run(self, statement: Statement, params: dict[str, Any]) -> Sequence[Any]:
        """Run ``statement`` in the lock transaction; its one row.

        The outermost lock transaction's only statement is sent in autocommit,
        where the server runs it as a transaction of its own: BEGIN and COMMIT
        cost no round trip (psycopg would wait for its BEGIN before sending the
        statement), and Django's commit on leaving ``atomic()`` finds no
        transaction open and sends nothing. It runs prepared (see
        ``django_dlock.backends.postgresql.prepared``). Inside another transaction (Django's
        TestCase wraps each test in one) it runs in that one, as plain SQL.
        """
        connection = self.connection
        with connection.cursor() as cursor:
            raw = connection.connection
            alone = (
                len(connection.atomic_blocks) == 1 and raw.info.transaction_status == PQTRANS_IDLE
            )
            if not alone:
                cursor.execute(statement.sql, params)
                return cast(Sequence[Any], cursor.fetchone())
            raw.autocommit = True
            try:
                self._prepared.execute(cursor, raw, statement, params)
            finally:
                # A connection that broke stays as it is: Django closes it.
                if raw.info.transaction_status == PQTRANS_IDLE:
                    raw.autocommit = False
            return cast(Sequence[Any], cursor.fetchone())  # the answer is one row

    def _lock(self, row: Sequence[Any] | None) -> DistributedLock | None:
        """The lock in ``row``'s first columns, with its db_now (a release's count
        of woken waiters may follow); None for no row."""
        if row is None:
            return None
        values = self._convert(row[: len(self.columns) + 1], self.connection)
        lock = self.model.from_db(self.using, self.attnames, values[:-1])
        lock.db_now = values[-1]  # type: ignore[attr-defined]
        return lock

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
    # A release NOTIFYs the channel of the head of the resource's queue (its
    # process's listener) with the head's ticket, and only when there is one:
    # NOTIFY takes a lock on the whole database's notification queue at commit,
    # which a release without waiters must not pay. The listener wakes that
    # waiter alone.

    def enqueue_waiter(
        self,
        resource: str,
        owner: str,
        seconds: float,
        *,
        channel: str = "",
        ttl: timedelta | None = None,
    ) -> tuple[int, QueueRow]:
        # FOR KEY SHARE of the lock row (when there is one) makes the INSERT wait
        # for a release in flight, and a release wait for an INSERT in flight: a
        # release either sees the ticket (and names it) or committed before the
        # lock row was read here. (A locking read that waited returns the row as
        # the release left it, though the statement's snapshot is older.) The
        # queue ahead is counted in the same statement: one round trip, where
        # an INSERT and a look took two, both on the path of a hand-over.
        qn = self.qn
        now_sql, _ = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        waiters = self.waiters_table
        sql = (
            f"WITH held AS (SELECT {qn('owner')} AS owner, {qn('expires_at')} AS expires_at "  # noqa: S608
            f"FROM {self.table} WHERE {qn('resource')} = %s FOR KEY SHARE), "
            f"queued AS (INSERT INTO {waiters} ({qn('resource')}, {qn('owner')}, "
            f"{qn('expires_at')}, {qn('channel')}, {qn('ttl')}) SELECT %s, %s, {expires_sql}, %s, %s::interval "
            "FROM (SELECT COUNT(*) FROM held) "
            f"locked, {ASYNC_COMMIT} RETURNING {qn('id')} AS id) "
            f"SELECT queued.id, held.owner, held.expires_at, {now_sql}, "
            f"(SELECT COUNT(*) FROM {waiters} w WHERE w.{qn('resource')} = %s "
            f"AND w.{qn('id')} < queued.id AND w.{qn('expires_at')} > {now_sql}) "
            "FROM queued LEFT JOIN held ON TRUE"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(
                sql,
                [
                    resource,
                    resource,
                    owner,
                    *expires_params,
                    channel,
                    self._ttl_value(ttl),
                    resource,
                ],
            )
            ticket, *state = cursor.fetchone()
        return int(ticket), QueueRow.of(*state)

    def mark_released(self, lock: DistributedLock) -> None:
        qn = self.qn
        values = self._released_values(lock)
        sql = (
            f"WITH head AS ({self._head_sql()}) UPDATE {self.table} "  # noqa: S608
            f"SET {qn('owner')} = %s, {qn('expires_at')} = %s WHERE {self.pk_column} = %s "
            f"RETURNING ({WAKE_HEAD})"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(
                sql,
                [lock.resource, NO_TICKET_EXCLUDED, *values, lock.pk],
            )

    def give_up_waiting(self, resource: str, ticket: int) -> bool:
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
            f"{WAKE_HEAD}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [ticket, resource, ticket, resource])
        return True  # no release hands a lock over here (grants_on_release)

    def _head_sql(self, condition: str = "", *, resource: str = "%s", ticket: str = "%s") -> str:
        """The live waiter first in line for ``resource`` (a placeholder), other
        than ``ticket`` (one), if ``condition`` (SQL) holds."""
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        assert not now_params  # noqa: S101 - DatabaseNow() is plain SQL
        return (
            f"SELECT w.{qn('id')} AS id, w.{qn('channel')} AS channel "  # noqa: S608
            f"FROM {self.waiters_table} w "
            f"WHERE w.{qn('resource')} = {resource} AND w.{qn('id')} <> {ticket} "
            f"AND w.{qn('expires_at')} > {now_sql} {condition} ORDER BY w.{qn('id')} LIMIT 1"
        )


# SQL: NOTIFY the head of the queue (the CTE ``head``) on its process's channel,
# with its ticket; a head that polls (no channel) is not notified. Its value:
# how many were woken.
# (OFFSET 0 keeps the filter in its subquery, ahead of the call: pg_notify()
# refuses an empty channel.)
WAKE_HEAD = (
    "SELECT COUNT(*) FROM (SELECT id, channel FROM head WHERE channel <> '' OFFSET 0) h, "
    "LATERAL pg_notify(h.channel, h.id::text)"
)
# libpq's transaction status of a connection with no transaction open.
PQTRANS_IDLE = 0
# No waiter has this ticket: mark_released() excludes none from the head.
NO_TICKET_EXCLUDED = 0
# A FROM item that makes the statement's own transaction (autocommit) commit
# without waiting for its WAL to reach the disk. For the waiter queue only: a
# ticket lost in a crash costs nothing (its waiter is gone too), and waiting for
# the flush of each ticket would cost the queue a disk write per turn.
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true) AS commit_mode"
ASYNC_COMMIT_CONDITION = "set_config('synchronous_commit', 'off', true) IS NOT NULL"
