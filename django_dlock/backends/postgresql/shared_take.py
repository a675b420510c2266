"""PostgreSQL's one statement for a shared acquisition: a reader, or a
semaphore's permit (the exclusive lock's is in ``exclusive``). What it shares
with the release, and the cases it leaves to the portable operation:
``locked``."""

from __future__ import annotations

from django_dlock.backends.base import LockBackend
from django_dlock.backends.postgresql.locked import PORTABLE, LockedRow
from django_dlock.backends.postgresql.prepared import Statement
from django_dlock.backends.postgresql.wake import head_sql, wake_sql
from django_dlock.backends.tickets import NO_TICKET
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.predicates import DELAY_RUNS, MAY_JOIN

# The answers' first column (or ``PORTABLE``).
REFUSED = "refused"
JOINED = "joined"  # a new shared hold
AGAIN = "again"  # the shared holder again


class SharedTakeStatement:
    """``take_shared``: a reader's (limit null) or a permit's acquisition on
    ``backend``'s alias. Its one row: the answer, the locked row's owner, how
    many waiters it woke, the locked row as it was with the database's now,
    the first valid shared hold's expiry (refused beside shared holders), and
    the hold as written."""

    def __init__(self, backend: LockBackend) -> None:
        tables, queue, row = backend.tables, backend.queue, LockedRow(backend.tables)
        c, table, pk = tables.column_sql, tables.table, tables.pk_column
        holds, h = tables.holds_table, tables.hold_column_sql
        now, locked, held, shared = row.now, row.cte, row.held, row.shared
        hold_columns = row.hold_columns
        qn = tables.qn
        m = f"'{SHARED_HOLDERS}'"
        queued = f"queued AS ({queue.queued_counts_sql('%(resource)s', '%(ticket)s')})"
        mine = (
            f"mine AS (SELECT {holds}.{h['id']} AS id FROM {holds} "  # noqa: S608
            f"WHERE {holds}.{h['resource']} = %(resource)s AND {holds}.{h['owner']} = %(owner)s "
            f"AND {holds}.{h['expires_at']} > {now} "
            f"AND (%(held)s IS NULL OR {holds}.{h['fencing_token']} = %(held)s))"
        )

        # ``MAY_JOIN``, with the holds the row counts. A permit the count
        # refuses is the portable operation's: the count may include holds
        # that expired unreleased.
        def may_join(holders: str) -> str:
            counted = {"ahead": "(SELECT n FROM queued)", "writers_ahead": "(SELECT x FROM queued)"}
            return MAY_JOIN.sql(tables.sql_row.spelling(holders=holders, **counted))

        join_free = f"CASE WHEN {may_join('0')} THEN '{JOINED}' ELSE '{REFUSED}' END"
        join_shared = (
            f"CASE WHEN {may_join('l.' + c['hold_count'])} THEN '{JOINED}' "
            f"WHEN %(limit)s IS NULL THEN '{REFUSED}' ELSE '{PORTABLE}' END"
        )
        # A waiter whose ticket lapsed is no longer queued (``ticket_counts_sql``).
        lapsed = f"%(ticket)s < {NO_TICKET} AND NOT {queue.ticket_counts_sql('%(ticket)s')}"
        decided = (
            f"decided AS (SELECT l.*, {shared} AS was_shared, CASE "  # noqa: S608
            f"WHEN {lapsed} THEN '{REFUSED}' "
            # A re-entry of a shared grant that was lost (a downgrade, of the
            # exclusive grant, is the portable operation's). The row, locked,
            # says so when nobody holds the resource: ``mine`` is read in the
            # statement's snapshot, which can predate the force-release (or the
            # release) that the lock waited for, and still show the hold.
            f"WHEN %(held)s IS NOT NULL AND NOT {held} THEN '{REFUSED}' "
            f"WHEN %(held)s IS NOT NULL AND NOT ({held} AND NOT {shared}) "
            f"AND NOT EXISTS (SELECT FROM mine) THEN '{REFUSED}' "
            f"WHEN {held} AND NOT {shared} THEN CASE WHEN %(limit)s IS NULL AND "
            f"l.{c['owner']} <> %(owner)s THEN '{REFUSED}' ELSE '{PORTABLE}' END "
            f"WHEN {shared} THEN CASE WHEN l.{c['limit']} IS DISTINCT FROM %(limit)s "
            f"THEN '{PORTABLE}' WHEN EXISTS (SELECT FROM mine) THEN '{AGAIN}' "
            f"ELSE {join_shared} END "
            # Lost by an exclusive holder with a lock-delay that still runs.
            f"WHEN {DELAY_RUNS.sql(tables.sql_row.aliased('l.'))} THEN '{REFUSED}' "
            f"ELSE {join_free} END AS action FROM locked l)"
        )
        joined_header = (
            f"header AS (UPDATE {table} SET {c['owner']} = {m}, {c['limit']} = %(limit)s, "  # noqa: S608
            f"{c['label']} = '', {c['fencing_token']} = {table}.{c['fencing_token']} + 1, "
            f"{c['hold_count']} = CASE WHEN d.was_shared THEN {table}.{c['hold_count']} + 1 "
            f"ELSE 1 END, {c['acquired_at']} = CASE WHEN d.was_shared "
            f"THEN {table}.{c['acquired_at']} ELSE {now} END, {c['expires_at']} = "
            f"CASE WHEN d.was_shared THEN GREATEST({table}.{c['expires_at']}, "
            f"{now} + %(duration)s) ELSE {now} + %(duration)s END FROM decided d "
            f"WHERE {table}.{pk} = d.{pk} AND d.action = '{JOINED}' "
            f"RETURNING {table}.{c['fencing_token']} AS token)"
        )
        names = ("resource", "owner", "label", "acquired_at", "expires_at", "hold_count")
        joined = (
            f"joined AS (INSERT INTO {holds} ({', '.join(h[n] for n in names)}, "  # noqa: S608
            f"{h['fencing_token']}, {h['limit']}) SELECT %(resource)s, %(owner)s, %(label)s, "
            f"{now}, {now} + %(duration)s, 1, header.token, %(limit)s FROM header "
            f"ON CONFLICT ({h['resource']}, {h['owner']}) DO UPDATE SET "
            f"{h['label']} = EXCLUDED.{h['label']}, {h['acquired_at']} = EXCLUDED.{h['acquired_at']}, "
            f"{h['expires_at']} = EXCLUDED.{h['expires_at']}, {h['hold_count']} = 1, "
            f"{h['fencing_token']} = EXCLUDED.{h['fencing_token']}, {h['limit']} = EXCLUDED.{h['limit']} "
            f"RETURNING {hold_columns}, {now} AS db_now)"
        )
        # Expired holds of others go as a new one comes (the count stays: it may
        # count them, and may count more than are valid, never fewer).
        tidy = (
            f"tidy AS (DELETE FROM {holds} WHERE {h['resource']} = %(resource)s "  # noqa: S608
            f"AND {h['owner']} <> %(owner)s AND {h['expires_at']} <= {now} "
            "AND EXISTS (SELECT FROM header))"
        )
        again = (
            f"again AS (UPDATE {holds} SET {h['expires_at']} = {now} + %(duration)s, "  # noqa: S608
            f"{h['hold_count']} = {holds}.{h['hold_count']} + %(reentrant)s FROM decided d "
            f"WHERE d.action = '{AGAIN}' AND {holds}.{h['id']} = (SELECT id FROM mine) "
            f"AND {holds}.{h['expires_at']} > {now} RETURNING {hold_columns}, {now} AS db_now), "
            f"covered AS (UPDATE {table} SET {c['expires_at']} = "
            f"GREATEST({table}.{c['expires_at']}, {now} + %(duration)s) FROM decided d "
            f"WHERE {table}.{pk} = d.{pk} AND EXISTS (SELECT FROM again))"
        )
        # Admitted beside others, a waiter wakes the next in line, who may fit too.
        head = head_sql(queue, resource="%(resource)s", ticket="%(ticket)s")
        woken = wake_sql(f"AND EXISTS (SELECT FROM joined) AND %(ticket)s < {NO_TICKET}")
        # A refusal's reason: the locked row as it was and, beside shared
        # holders, the first of their holds to expire (``Refusal``).
        locked_row = ", ".join(f"d.{name}" for name in (*tables.columns, "db_now"))
        first_expiry = (
            f"CASE WHEN d.action = '{REFUSED}' AND d.was_shared THEN "  # noqa: S608
            f"(SELECT MIN({holds}.{h['expires_at']}) FROM {holds} "
            f"WHERE {holds}.{h['resource']} = %(resource)s AND {holds}.{h['expires_at']} > {now}) "
            "END"
        )
        take_shared = (
            f"{locked}, {queued}, {mine}, {decided}, {joined_header}, {joined}, {tidy}, {again}, "  # noqa: S608
            "written AS (SELECT * FROM joined UNION ALL SELECT * FROM again), "
            f"dequeued AS (DELETE FROM {tables.waiters_table} WHERE {qn('id')} = %(ticket)s "
            f"AND EXISTS (SELECT FROM written)), head AS ({head}) "
            f"SELECT d.action, d.{c['owner']}, ({woken}), {locked_row}, {first_expiry}, "
            "written.* FROM decided d LEFT JOIN written ON TRUE"
        )
        self.statement = Statement("take_shared", take_shared)
