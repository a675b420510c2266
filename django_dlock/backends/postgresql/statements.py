"""PostgreSQL's one statement per lock operation, written once per database alias.

Each operation is one statement, which locks the resource's row (a FOR UPDATE
CTE, ``locked``) and writes only that row, judged on the values the lock
returned: one snapshot, so the write never meets a row that the lock did not
see. (As two statements, an UPDATE's newer snapshot could find a row inserted
and committed between them and write it unjudged: a force-release reported
"nothing released" while it released a new holder's lock.) Its one row: the
locked row's owner and whether it was held, then the row as written and the
database's now (NULL where there was none).
"""

from __future__ import annotations

from django_dlock.backends.base import LockBackend
from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.postgresql.prepared import Statement
from django_dlock.django_private import compile_expression
from django_dlock.rules import EXCLUSIVE, SHARED, SHARED_HOLDERS


class OperationStatements:
    """The statements of take (and take-and-leave-the-queue), extend, release
    and force-release on one alias."""

    def __init__(self, backend: LockBackend) -> None:
        # Only quoted identifiers and Django-compiled SQL are formatted in; values
        # are parameters. Written once per alias: this is the hot path.
        c, table = backend.column_sql, backend.table
        now, _ = compile_expression(backend.using, DatabaseNow())
        row = f"{', '.join(backend.columns)}, {now}"  # the lock's columns and db_now

        def valid_in(alias: str = "") -> str:
            """SQL: the row (of ``alias``, a table alias and dot) has a holder now."""
            return f"{alias}{c['owner']} <> '' AND {alias}{c['expires_at']} > {now}"

        locked = (
            f"WITH locked AS (SELECT {row} AS db_now "  # noqa: S608
            f"FROM {table} WHERE {c['resource']} = %(resource)s FOR UPDATE)"
        )
        after = ", ".join(f"{table}.{name}" for name in backend.columns)
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
                f"WHERE {table}.{backend.pk_column} = locked.{backend.pk_column} AND {condition} "
                f"RETURNING {after}, {now}{woken}) {answer} LEFT JOIN written ON TRUE"
            )

        # Acquire. Free (released or expired): a new holder and a larger token.
        # Held by the same owner: a later expiry, the same token and acquired_at.
        # Held by another: no write.
        # A re-entry (``held``: the token of the grant it holds) only of that grant.
        def free_for_owner(alias: str) -> str:
            return (
                f"NOT ({valid_in(alias)} AND {alias}{c['owner']} <> %(owner)s) AND "
                f"(%(held)s IS NULL OR ({valid_in(alias)} AND "
                f"{alias}{c['fencing_token']} = %(held)s))"
            )

        mine = f"{table}.{c['owner']} = %(owner)s AND {table}.{c['expires_at']} > {now}"
        # A reentrant acquisition by the holder adds a hold; a new holder has one.
        take = (
            f"{c['owner']} = %(owner)s, {c['acquired_at']} = "
            f"CASE WHEN {mine} THEN {table}.{c['acquired_at']} ELSE {now} END, "
            f"{c['expires_at']} = {now} + %(duration)s, {c['fencing_token']} = "
            f"CASE WHEN {mine} THEN {table}.{c['fencing_token']} "
            f"ELSE {table}.{c['fencing_token']} + 1 END, {c['hold_count']} = "
            f"CASE WHEN {mine} THEN {table}.{c['hold_count']} + %(reentrant)s ELSE 1 END, "
            f"{c['label']} = CASE WHEN {mine} THEN {table}.{c['label']} ELSE %(label)s END, "
            f"{c['limit']} = NULL"
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
            f"INSERT INTO {table} ({c['resource']}, {c['owner']}, {c['acquired_at']}, "
            f"{c['expires_at']}, {c['fencing_token']}, {c['hold_count']}, {c['label']}) "
            f"SELECT %(resource)s, %(owner)s, {now}, {now} + %(duration)s, "
            f"COALESCE(({backend._floor_sql()}), 0) + 1, "
            "1, %(label)s "
            f"WHERE {no_row} AND %(held)s IS NULL ON CONFLICT ({c['resource']}) "
            f"DO UPDATE SET {take} WHERE {free_for_owner(f'{table}.')} RETURNING {after}, {now}"
        )
        update = (
            f"UPDATE {table} SET {take} FROM locked "  # noqa: S608
            f"WHERE {table}.{backend.pk_column} = locked.{backend.pk_column} "
            f"AND {free_for_owner('locked.')} RETURNING {after}, {now}"
        )
        taken = (
            f"{locked}, updated AS ({update}), inserted AS ({insert}), "  # noqa: S608
            "written AS (SELECT * FROM updated UNION ALL SELECT * FROM inserted)"
        )
        self.take = Statement("take", f"{taken} {answer} LEFT JOIN written ON TRUE")
        # lock()'s waiter that takes the lock leaves its queue in the same statement.
        self.take_leaving = Statement(
            "take_leaving",
            f"{taken}, dequeued AS (DELETE FROM {backend.waiters_table} "  # noqa: S608
            f"WHERE {backend.qn('id')} = %(ticket)s AND EXISTS (SELECT FROM written)) "
            f"{answer} LEFT JOIN written ON TRUE",
        )

        owned = f"{held} AND locked.{c['owner']} = %(owner)s"
        # (Releases are ``shared.SharedStatements.release``.) An operator's
        # force-release leaves the row expired and ownerless, to keep the
        # fencing token counting, and wakes the head of the resource's queue and
        # the readers that fit beside it. A row held by shared holders is left
        # to the portable operation: it is never owned.
        head = head_sql(backend, resource="%(resource)s", ticket=str(NO_TICKET_EXCLUDED))
        not_shared = f"locked.{c['owner']} <> '{SHARED_HOLDERS}'"
        self.extend = Statement(
            "extend", decide_and_write(f"{c['expires_at']} = {now} + %(duration)s", owned)
        )
        # The common release: the exclusive holder's, of a resource nobody waits
        # for, or one hold of its reentrant holds, is one owner-checked UPDATE,
        # without the CTEs of the full release (``shared.SharedStatements.release``),
        # which runs where this one writes nothing: shared holders, a queue
        # (even of dead waiters) when the lock would come free, or nothing of
        # the owner's to release. A concurrent write of the row makes the UPDATE
        # wait and judge the row anew, as the full release's FOR UPDATE does.
        kept = f"{c['hold_count']} > 1"
        self.release_alone = Statement(
            "release_alone",
            f"UPDATE {table} SET "  # noqa: S608
            f"{c['owner']} = CASE WHEN {kept} THEN {c['owner']} ELSE '' END, "
            f"{c['expires_at']} = CASE WHEN {kept} THEN {c['expires_at']} ELSE {now} END, "
            f"{c['hold_count']} = CASE WHEN {kept} THEN {c['hold_count']} - 1 "
            f"ELSE {c['hold_count']} END WHERE {c['resource']} = %(resource)s "
            f"AND {c['owner']} = %(owner)s AND {c['expires_at']} > {now} AND ({kept} "
            f"OR NOT EXISTS (SELECT FROM {backend.waiters_table} w "
            f"WHERE w.{backend.qn('resource')} = %(resource)s)) RETURNING {after}, {now}",
        )
        self.force_release = Statement(
            "force_release",
            decide_and_write(
                f"{c['owner']} = '', {c['expires_at']} = {now}",
                f"{held} AND {not_shared}",
                ctes=f", head AS ({head}), {fitting_sql(backend)}",
                woken=f", ({wake_sql(readers=True)})",
            ),
        )


def head_sql(
    backend: LockBackend,
    condition: str = "",
    *,
    resource: str = "%s",
    ticket: str = "%s",
    locked: bool = False,
) -> str:
    """The live waiter first in line for ``resource`` (a placeholder), other
    than ``ticket`` (one), if ``condition`` (SQL) holds: its ticket, channel
    and what it wants. ``locked``: read ``FOR UPDATE``, which skips a waiter
    whose ticket went while the statement ran (``handover``)."""
    qn = backend.qn
    columns = ", ".join(f"w.{qn(name)} AS {qn(name)}" for name in HEAD_COLUMNS)
    return (
        f"SELECT {columns} FROM {backend.waiters_table} w "  # noqa: S608
        f"WHERE w.{qn('resource')} = {resource} AND w.{qn('id')} <> {ticket} "
        f"AND {backend.live_waiter_sql('w.')} {condition} ORDER BY w.{qn('id')} LIMIT 1"
        f"{' FOR UPDATE OF w' if locked else ''}"
    )


# The columns of the CTE ``head``: who the head is, how to wake it, what it
# wants, and of which resource ("limit", a reserved word, is read quoted).
HEAD_COLUMNS = ("id", "channel", "owner", "ttl", "label", "mode", "resource", "limit")


def wake_sql(condition: str = "", *, readers: bool = False) -> str:
    """SQL: NOTIFY the head of the queue (the CTE ``head``) on its process's
    channel, with its ticket, if ``condition`` (SQL, ``AND ...``) holds; with
    ``readers``, also the readers that fit beside a head that reads (the CTE
    ``fitting``, ``fitting_sql``). A waiter that polls (no channel) is not
    notified. Its value: how many were woken."""
    # (OFFSET 0 keeps the filter in its subquery, ahead of the call: pg_notify()
    # refuses an empty channel.)
    woken = f"SELECT id, channel FROM head WHERE channel <> '' {condition}"  # noqa: S608
    if readers:
        woken += f" UNION ALL SELECT id, channel FROM fitting WHERE TRUE {condition}"  # noqa: S608
    return (
        f"SELECT COUNT(*) FROM ({woken} OFFSET 0) h, "  # noqa: S608
        "LATERAL pg_notify(h.channel, h.id::text)"
    )


def fitting_sql(backend: LockBackend, *, leaving: str = "0") -> str:
    """SQL: the CTE ``fitting``: the listening waiters behind the head of the
    queue (the CTE ``head``) that may be admitted beside it. When the head is a
    reader, the readers queued before the first writer; when it wants a permit,
    the permit waiters of the same limit, as many as the permits the head leaves
    free. A statement that frees the resource or a permit wakes them with the
    head (``wake_sql(readers=True)``), so they take their holds side by side
    instead of each waking the next after its own acquisition. A wake-up only
    starts a take, which decides under the row lock: waking one too many costs
    it a look, never a permit over the limit. (The writers that count are those
    between the head and the reader: one before the head is a ticket that the
    statement deletes, or passes over. The holds that count are the valid ones
    the statement's snapshot sees less ``leaving``, SQL for how many of them the
    statement itself deletes.)"""
    qn = backend.qn

    def reader(alias: str) -> str:
        return f"{alias}{qn('mode')} = '{SHARED}' AND {alias}{qn('limit')} IS NULL"

    def between(alias: str) -> str:
        return backend.queued_before_sql(
            "head.resource", f"w.{qn('id')}", after="head.id", alias=alias
        )

    holders = backend.holders_sql("head.resource")
    readers = (
        f"{reader('head.')} AND {reader('w.')} "
        f"AND NOT EXISTS (SELECT {between('x')} AND x.{qn('mode')} = '{EXCLUSIVE}')"
    )
    permits = (
        f"head.{qn('limit')} IS NOT NULL AND w.{qn('limit')} = head.{qn('limit')} "
        f"AND w.{qn('mode')} = '{SHARED}' "
        f"AND (SELECT COUNT(*) {between('x')}) < head.{qn('limit')} - 1 - ({holders}) + {leaving}"
    )
    return (
        f"fitting AS (SELECT w.{qn('id')} AS id, w.{qn('channel')} AS channel "  # noqa: S608
        f"FROM head JOIN {backend.waiters_table} w ON w.{qn('resource')} = head.resource "
        f"AND w.{qn('id')} > head.id WHERE (({readers}) OR ({permits})) "
        f"AND w.{qn('channel')} <> '' AND {backend.live_waiter_sql('w.')})"
    )


# No waiter has this ticket: mark_released() excludes none from the head.
NO_TICKET_EXCLUDED = 0
# A FROM item that makes the statement's own transaction (autocommit) commit
# without waiting for its WAL to reach the disk. For the waiter queue only: a
# ticket lost in a crash costs nothing (its waiter is gone too), and waiting for
# the flush of each ticket would cost the queue a disk write per turn.
ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true) AS commit_mode"
ASYNC_COMMIT_CONDITION = "set_config('synchronous_commit', 'off', true) IS NOT NULL"
