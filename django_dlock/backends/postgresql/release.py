"""PostgreSQL's one statement for a shared acquisition (a reader, a permit) and
for any release, beside the exclusive lock's (``statements``).

The statement locks the resource's row (``FOR UPDATE``), and decides on what
that lock returned: the row as the last transaction left it. Other tables are
read in the statement's snapshot, which can predate that transaction: so the
decisions that must be exact read only the row (its owner, expiry, limit and
``hold_count``, which counts the shared holds, never fewer than are valid), and
a case the row cannot settle (a permit when the count says the semaphore is
full, an upgrade, a downgrade, another kind) answers ``portable``: the
backend's portable operation then decides, reading the holds under the lock.
"""

from __future__ import annotations

from django_dlock.backends.base import LockBackend
from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.postgresql.handover import HANDED, granting, handed_sql
from django_dlock.backends.postgresql.prepared import Statement
from django_dlock.backends.postgresql.wake import (
    NO_TICKET_EXCLUDED,
    fitting_sql,
    head_sql,
    wake_sql,
)
from django_dlock.backends.queue import NO_TICKET
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED_HOLDERS

# The answers' first column.
PORTABLE = "portable"  # the portable operation decides
REFUSED = "refused"
JOINED = "joined"  # a new shared hold
AGAIN = "again"  # the shared holder again
RELEASED = "released"
DECREMENTED = "decremented"
FORBIDDEN = "forbidden"
NOT_FOUND = "not_found"


class SharedStatements:
    """``take_shared`` and ``release`` on one alias."""

    def __init__(self, backend: LockBackend) -> None:
        # Only quoted identifiers, constants and Django-compiled SQL are
        # formatted in; values are parameters.
        tables, queue = backend.tables, backend.queue
        c, table, pk = tables.column_sql, tables.table, tables.pk_column
        holds, hold_attnames, h = tables.holds_table, tables.hold_attnames, tables.hold_column_sql
        now, _ = compile_expression(tables.using, DatabaseNow())
        qn = tables.qn
        m = f"'{SHARED_HOLDERS}'"
        hold_columns = ", ".join(f"{holds}.{h[name]}" for name in hold_attnames)
        locked = (
            f"WITH locked AS (SELECT {', '.join(tables.columns)}, {now} AS db_now "  # noqa: S608
            f"FROM {table} WHERE {c['resource']} = %(resource)s FOR UPDATE)"
        )
        held = f"(l.{c['owner']} <> '' AND l.{c['expires_at']} > {now})"
        shared = f"(l.{c['owner']} = {m} AND l.{c['expires_at']} > {now})"

        # -- take: a reader (limit null) or a permit ------------------------------------
        queued = f"queued AS ({queue.queued_counts_sql('%(resource)s', '%(ticket)s')})"
        mine = (
            f"mine AS (SELECT {holds}.{h['id']} AS id FROM {holds} "  # noqa: S608
            f"WHERE {holds}.{h['resource']} = %(resource)s AND {holds}.{h['owner']} = %(owner)s "
            f"AND {holds}.{h['expires_at']} > {now} "
            f"AND (%(held)s IS NULL OR {holds}.{h['fencing_token']} = %(held)s))"
        )
        # A reader: refused while a writer holds it or queues before it. A
        # permit: admitted while the holds counted and those queued before it
        # leave one.
        join_free = (
            "CASE WHEN %(limit)s IS NULL THEN CASE WHEN (SELECT x FROM queued) > 0 "  # noqa: S608
            f"THEN '{REFUSED}' ELSE '{JOINED}' END "
            f"WHEN (SELECT n FROM queued) < %(limit)s THEN '{JOINED}' ELSE '{REFUSED}' END"
        )
        join_shared = (
            "CASE WHEN %(limit)s IS NULL THEN CASE WHEN (SELECT x FROM queued) > 0 "  # noqa: S608
            f"THEN '{REFUSED}' ELSE '{JOINED}' END "
            f"WHEN l.{c['hold_count']} + (SELECT n FROM queued) < %(limit)s THEN '{JOINED}' "
            f"ELSE '{PORTABLE}' END"
        )
        decided = (
            f"decided AS (SELECT l.*, {shared} AS was_shared, CASE "  # noqa: S608
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
        take_shared = (
            f"{locked}, {queued}, {mine}, {decided}, {joined_header}, {joined}, {tidy}, {again}, "  # noqa: S608
            "written AS (SELECT * FROM joined UNION ALL SELECT * FROM again), "
            f"dequeued AS (DELETE FROM {tables.waiters_table} WHERE {qn('id')} = %(ticket)s "
            f"AND EXISTS (SELECT FROM written)), head AS ({head}) "
            f"SELECT d.action, d.{c['owner']}, ({woken}), written.* FROM decided d "
            "LEFT JOIN written ON TRUE"
        )
        self.take_shared = Statement("take_shared", take_shared)

        # -- release: the exclusive holder's, or a shared hold's ---------------------------
        # One hold of several (reentrant) goes; the last releases. The resource's
        # row is released when its count says no shared hold is left (a count
        # never smaller than the holds that are valid).
        kept = f"l.{c['hold_count']} > 1"
        # The release that frees the resource hands it to a listening head that
        # wants it exclusively (``handover``): the header's UPDATE joins
        # ``handed``. It returns the row as released, whoever holds it next.
        as_released = {
            "owner": f"CASE WHEN {kept} THEN l.{c['owner']} ELSE '' END",
            "expires_at": f"CASE WHEN {kept} THEN l.{c['expires_at']} ELSE {now} END",
            "hold_count": f"CASE WHEN {kept} THEN l.{c['hold_count']} - 1 "
            f"ELSE l.{c['hold_count']} END",
        }
        released_columns = ", ".join(
            f"{as_released.get(name, f'l.{column}')} AS {column}" for name, column in c.items()
        )
        exclusive = (
            f"exclusive AS (UPDATE {table} SET {granting(tables, as_released, 'l.')} "  # noqa: S608
            f"FROM locked l LEFT JOIN handed {HANDED} ON TRUE WHERE {table}.{pk} = l.{pk} "
            f"AND {held} AND l.{c['owner']} = %(owner)s "
            f"RETURNING {released_columns}, {now} AS db_now)"
        )
        my_hold = (
            f"my_hold AS (SELECT {hold_columns} FROM {holds}, locked l WHERE {shared} "  # noqa: S608
            f"AND {holds}.{h['resource']} = %(resource)s AND {holds}.{h['owner']} = %(owner)s "
            f"AND {holds}.{h['expires_at']} > {now})"
        )
        one_less = (
            f"one_less AS (UPDATE {holds} SET {h['hold_count']} = {holds}.{h['hold_count']} - 1 "  # noqa: S608
            f"FROM my_hold m WHERE {holds}.{h['id']} = m.{h['id']} AND m.{h['hold_count']} > 1 "
            f"AND {holds}.{h['expires_at']} > {now} RETURNING {hold_columns}, {now} AS db_now)"
        )
        gone = (
            f"gone AS (DELETE FROM {holds} USING my_hold m WHERE {holds}.{h['id']} = m.{h['id']} "  # noqa: S608
            f"AND m.{h['hold_count']} = 1 AND {holds}.{h['expires_at']} > {now} "
            f"RETURNING {hold_columns}, {now} AS db_now)"
        )
        last = f"{table}.{c['hold_count']} <= 1"
        as_left = {
            "hold_count": f"GREATEST({table}.{c['hold_count']} - 1, 0)",
            "owner": f"CASE WHEN {last} THEN '' ELSE {table}.{c['owner']} END",
            "expires_at": f"CASE WHEN {last} THEN {now} ELSE {table}.{c['expires_at']} END",
            "limit": f"CASE WHEN {last} THEN NULL ELSE {table}.{c['limit']} END",
        }
        shared_header = (
            f"shared_header AS (UPDATE {table} SET {granting(tables, as_left, table + '.')} "  # noqa: S608
            f"FROM locked l LEFT JOIN handed {HANDED} ON TRUE "
            f"WHERE {table}.{pk} = l.{pk} AND EXISTS (SELECT FROM gone) "
            f"RETURNING {table}.{c['owner']} AS left_owner, {table}.{c['limit']} AS left_limit)"
        )
        # The head takes the lock from a release that leaves nobody holding it:
        # the exclusive holder's last hold, or the last shared hold (its count
        # never smaller than the valid holds, so none is left).
        frees = (
            f"EXISTS (SELECT FROM locked l WHERE l.{c['hold_count']} <= 1 AND "  # noqa: S608
            f"(({held} AND l.{c['owner']} = %(owner)s) "
            f"OR ({shared} AND EXISTS (SELECT FROM gone))))"
        )
        # Released, or a permit freed: the head of the queue looks, and the
        # readers that fit beside it when it reads.
        freed = (
            f"(SELECT {c['owner']} AS left_owner, {c['limit']} AS left_limit FROM exclusive "  # noqa: S608
            "UNION ALL SELECT left_owner, left_limit FROM shared_header)"
        )
        release_woken = wake_sql(
            "AND (EXISTS (SELECT FROM handed) OR EXISTS (SELECT FROM "  # noqa: S608
            f"{freed} f WHERE f.left_owner = '' OR f.left_limit IS NOT NULL))",
            readers=True,
        )
        outcome = (
            f"CASE WHEN NOT {held} OR l.{c['owner']} IS NULL THEN '{NOT_FOUND}' "  # noqa: S608
            f"WHEN EXISTS (SELECT FROM exclusive WHERE {c['owner']} <> '') THEN '{DECREMENTED}' "
            f"WHEN EXISTS (SELECT FROM exclusive) THEN '{RELEASED}' "
            f"WHEN EXISTS (SELECT FROM one_less) THEN '{DECREMENTED}' "
            f"WHEN EXISTS (SELECT FROM gone) THEN '{RELEASED}' "
            f"WHEN {shared} AND NOT EXISTS (SELECT FROM my_hold) THEN '{FORBIDDEN}' "
            f"WHEN {shared} THEN '{PORTABLE}' ELSE '{FORBIDDEN}' END"
        )
        release_head = head_sql(
            queue, resource="%(resource)s", ticket=str(NO_TICKET_EXCLUDED), locked=True
        )
        release = (
            f"{locked}, {my_hold}, {gone}, head AS ({release_head}), "  # noqa: S608
            f"{fitting_sql(queue, leaving='(SELECT COUNT(*) FROM gone)')}, "
            f"{handed_sql(tables, frees)}, {exclusive}, {one_less}, {shared_header} "
            f"SELECT {outcome}, l.{c['owner']}, ({release_woken}), e.*, w.* "
            "FROM (SELECT) one LEFT JOIN locked l ON TRUE LEFT JOIN exclusive e ON TRUE "
            "LEFT JOIN (SELECT * FROM one_less UNION ALL SELECT * FROM gone) w ON TRUE"
        )
        self.release = Statement("release_any", release)
