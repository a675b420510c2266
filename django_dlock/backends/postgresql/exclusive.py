"""PostgreSQL's one statement per operation on the exclusive lock (take, extend,
force-release), written once per database alias. (A shared acquisition is
``shared_take``'s; every release by an owner, ``release``'s.)

Each operation is one statement, which locks the resource's row (a FOR UPDATE
CTE, ``locked``) and writes only that row, judged on the values the lock
returned: one snapshot, so the write never meets a row that the lock did not
see. (As two statements, an UPDATE's newer snapshot could find a row inserted
and committed between them and write it unjudged: a force-release reported
"nothing released" while it released a new holder's lock.) Its one row: the
locked row's owner and whether it was held, the locked row as it was and the
database's now, then the row as written and the database's now (NULL where
there was none).
"""

from __future__ import annotations

from django_dlock.backends.base import LockBackend
from django_dlock.backends.postgresql.prepared import Statement
from django_dlock.backends.postgresql.wake import (
    NO_TICKET_EXCLUDED,
    fitting_sql,
    head_sql,
    wake_sql,
)
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.grant import revoked_sql
from django_dlock.rules.predicates import FREE_FOR_OWNER, HELD, HELD_BY_OWNER


class ExclusiveStatements:
    """The statements of take (and take-and-leave-the-queue), extend and
    force-release on one alias."""

    def __init__(self, backend: LockBackend) -> None:
        # Only quoted identifiers and Django-compiled SQL are formatted in; values
        # are parameters. Written once per alias: this is the hot path.
        tables = backend.tables
        c, table = tables.column_sql, tables.table
        now, _ = compile_expression(tables.using, DatabaseNow())
        row = f"{', '.join(tables.columns)}, {now}"  # the lock's columns and db_now

        rule_row = tables.sql_row

        def valid_in(alias: str = "") -> str:
            """SQL: the row (of ``alias``, a table alias and dot) has a holder now."""
            return HELD.sql(rule_row.aliased(alias))

        locked = (
            f"WITH locked AS (SELECT {row} AS db_now "  # noqa: S608
            f"FROM {table} WHERE {c['resource']} = %(resource)s FOR UPDATE)"
        )
        after = ", ".join(f"{table}.{name}" for name in tables.columns)
        held = valid_in("locked.")
        # The locked row as it was comes too: a refusal's reason (``Refusal``).
        answer = (
            f"SELECT locked.{c['owner']}, {held}, locked.*, written.* "  # noqa: S608
            "FROM (SELECT) one LEFT JOIN locked ON TRUE"
        )

        def decide_and_write(
            assignments: str, condition: str, ctes: str = "", woken: str = ""
        ) -> str:
            return (
                f"{locked}{ctes}, written AS (UPDATE {table} SET {assignments} FROM locked "  # noqa: S608
                f"WHERE {table}.{tables.pk_column} = locked.{tables.pk_column} AND {condition} "
                f"RETURNING {after}, {now}{woken}) {answer} LEFT JOIN written ON TRUE"
            )

        # Acquire. Free (released or expired): a new holder and a larger token.
        # Held by the same owner: a later expiry, the same token and acquired_at.
        # Held by another: no write.
        # A re-entry (``held``: the token of the grant it holds) only of that grant.
        # Lost with a lock-delay that still runs: nobody's.
        def free_for_owner(alias: str) -> str:
            return FREE_FOR_OWNER.sql(rule_row.aliased(alias))

        mine = HELD_BY_OWNER.sql(rule_row.aliased(f"{table}."))
        # A reentrant acquisition by the holder adds a hold; a new holder has one.
        take = (
            f"{c['owner']} = %(owner)s, {c['acquired_at']} = "
            f"CASE WHEN {mine} THEN {table}.{c['acquired_at']} ELSE {now} END, "
            f"{c['expires_at']} = {now} + %(duration)s, {c['fencing_token']} = "
            f"CASE WHEN {mine} THEN {table}.{c['fencing_token']} "
            f"ELSE {table}.{c['fencing_token']} + 1 END, {c['hold_count']} = "
            f"CASE WHEN {mine} THEN {table}.{c['hold_count']} + %(reentrant)s ELSE 1 END, "
            f"{c['label']} = CASE WHEN {mine} THEN {table}.{c['label']} ELSE %(label)s END, "
            f"{c['limit']} = NULL, {c['lock_delay']} = "
            f"CASE WHEN {mine} THEN COALESCE(%(lock_delay)s::interval, {table}.{c['lock_delay']}) "
            "ELSE %(lock_delay)s::interval END"
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

        def taken_if(condition: str = "") -> str:
            """The CTEs of an acquisition that writes only where ``condition``
            (SQL, "AND ...") holds as well."""
            insert = (
                f"INSERT INTO {table} ({c['resource']}, {c['owner']}, {c['acquired_at']}, "
                f"{c['expires_at']}, {c['fencing_token']}, {c['hold_count']}, {c['label']}, "
                f"{c['lock_delay']}) SELECT %(resource)s, %(owner)s, {now}, {now} + %(duration)s, "
                f"COALESCE(({backend.rows.floor_sql()}), 0) + 1, "
                "1, %(label)s, %(lock_delay)s::interval "
                f"WHERE {no_row} AND %(held)s IS NULL {condition} ON CONFLICT ({c['resource']}) "
                f"DO UPDATE SET {take} WHERE {free_for_owner(f'{table}.')} {condition} "
                f"RETURNING {after}, {now}"
            )
            update = (
                f"UPDATE {table} SET {take} FROM locked "  # noqa: S608
                f"WHERE {table}.{tables.pk_column} = locked.{tables.pk_column} "
                f"AND {free_for_owner('locked.')} {condition} RETURNING {after}, {now}"
            )
            return (
                f"{locked}, updated AS ({update}), inserted AS ({insert}), "  # noqa: S608
                "written AS (SELECT * FROM updated UNION ALL SELECT * FROM inserted)"
            )

        taken = taken_if()
        self.take = Statement("take", f"{taken} {answer} LEFT JOIN written ON TRUE")
        # The common acquisition, of a released row (or a re-acquisition of
        # the owner's own), is an UPDATE without the lock CTE and the INSERT;
        # its answer is the row's owner, whether it was held and its expiry, as
        # the statement's snapshot has them, the database's now, then the row
        # as written. Where it writes nothing and the snapshot shows another
        # owner's valid hold, that is the refusal: the UPDATE judged that same
        # version (a row that fails the WHERE in the snapshot is not read
        # again). Else ``take`` decides, in a statement of its own: no row yet,
        # an expired holder's (whose name the ``lock_taken_over`` signal needs,
        # as it was locked), or one released by an operator with a lock-delay
        # (refused while it runs).
        released = f"{table}.{c['owner']} = '' AND {table}.{c['lock_delay']} IS NULL"

        def take_released(name: str, condition: str = "") -> Statement:
            return Statement(
                name,
                f"WITH written AS (UPDATE {table} SET {take} "  # noqa: S608
                f"WHERE {c['resource']} = %(resource)s AND (({released}) OR {mine}) "
                f"{condition} RETURNING {after}, {now}) SELECT snapshot.{c['owner']}, "
                f"{valid_in('snapshot.')}, snapshot.{c['expires_at']}, {now}, written.* "
                f"FROM (SELECT) one LEFT JOIN {table} snapshot "
                f"ON snapshot.{c['resource']} = %(resource)s LEFT JOIN written ON TRUE",
            )

        self.take_released = take_released("take_released")
        # A blocking lock()'s first take, before it queues (``Claim.behind_queue``):
        # the same, only where nobody is queued (``WaiterQueue.nobody_queued``).
        nobody_queued = f"AND {backend.queue.nobody_queued('%(resource)s')}"
        self.take_released_behind = take_released("take_released_behind", nobody_queued)
        self.take_behind = Statement(
            "take_behind", f"{taken_if(nobody_queued)} {answer} LEFT JOIN written ON TRUE"
        )
        # lock()'s waiter that takes the lock leaves its queue in the same
        # statement; one whose ticket lapsed, or that no longer heads the queue
        # (a higher priority queued since its look: ``ticket_heads``), takes nothing.
        queued = f"AND {backend.queue.ticket_heads('%(ticket)s', '%(resource)s')}"
        self.take_leaving = Statement(
            "take_leaving",
            f"{taken_if(queued)}, dequeued AS (DELETE FROM {tables.waiters_table} "  # noqa: S608
            f"WHERE {tables.qn('id')} = %(ticket)s AND EXISTS (SELECT FROM written)) "
            f"{answer} LEFT JOIN written ON TRUE",
        )

        owned = f"{held} AND locked.{c['owner']} = %(owner)s"
        # (Releases are ``release.ReleaseStatement``'s.) An operator's
        # force-release leaves the row expired and ownerless, to keep the
        # fencing token counting, and wakes the head of the resource's queue and
        # the readers that fit beside it. A row held by shared holders is left
        # to the portable operation: it is never owned.
        head = head_sql(backend.queue, resource="%(resource)s", ticket=str(NO_TICKET_EXCLUDED))
        not_shared = f"locked.{c['owner']} <> '{SHARED_HOLDERS}'"
        self.extend = Statement(
            "extend", decide_and_write(f"{c['expires_at']} = {now} + %(duration)s", owned)
        )
        # A hand-over's grant its head may not have started on yet is revoked,
        # kept from others until its offer lease ends (``rules.grant``).
        self.force_release = Statement(
            "force_release",
            decide_and_write(
                f"{c['owner']} = '', {c['expires_at']} = {revoked_sql(rule_row.aliased(table + '.'))}",
                f"{held} AND {not_shared}",
                ctes=f", head AS ({head}), {fitting_sql(backend.queue)}",
                woken=f", ({wake_sql(readers=True)})",
            ),
        )
