"""PostgreSQL's releases by an owner: the short one where the lock is the
owner's alone (``AloneReleaseStatement``), and the one statement for every
release (``ReleaseStatement``): the exclusive holder's, or a shared hold's (a
reader's, a permit's), with the hand-over to the head of the queue
(``handover``) and the wake-up of those that fit beside it (``wake``).
What it shares with the shared acquisition, and the cases it leaves to the
portable operation: ``locked``."""

from __future__ import annotations

from django_dlock.backends.base import LockBackend
from django_dlock.backends.postgresql.handover import (
    HANDED,
    SHARED_GRANTS,
    grant_notice_sql,
    granting,
    handed_sql,
)
from django_dlock.backends.postgresql.locked import PORTABLE, LockedRow
from django_dlock.backends.postgresql.prepared import Statement
from django_dlock.backends.postgresql.shared_handover import (
    TOLD,
    header_values,
    shared_handover_sql,
)
from django_dlock.backends.postgresql.wake import (
    NO_TICKET_EXCLUDED,
    fitting_sql,
    head_sql,
    wake_sql,
)
from django_dlock.rules.predicates import HELD_BY_OWNER

# The answers' first column (or ``PORTABLE``).
RELEASED = "released"
DECREMENTED = "decremented"
FORBIDDEN = "forbidden"
NOT_FOUND = "not_found"


class AloneReleaseStatement:
    """``release_alone``: the common release, the exclusive holder's of a
    resource nobody waits for, or one of its reentrant holds, as one
    owner-checked ``UPDATE`` without the CTEs of ``ReleaseStatement``, which
    runs where this one writes nothing: shared holders, a queue (even of dead
    waiters) when the lock would come free, or nothing of the owner's to
    release. Its row: the lock's row as written and the database's now; none
    where it wrote nothing. (A concurrent write of the row makes the ``UPDATE``
    wait and judge the row anew, as the full release's ``FOR UPDATE`` does.)"""

    def __init__(self, backend: LockBackend) -> None:
        tables, row = backend.tables, LockedRow(backend.tables)
        c, table, now = tables.column_sql, tables.table, row.now
        after = ", ".join(f"{table}.{name}" for name in tables.columns)
        kept = f"{c['hold_count']} > 1"
        self.statement = Statement(
            "release_alone",
            f"UPDATE {table} SET "  # noqa: S608
            f"{c['owner']} = CASE WHEN {kept} THEN {c['owner']} ELSE '' END, "
            f"{c['expires_at']} = CASE WHEN {kept} THEN {c['expires_at']} ELSE {now} END, "
            f"{c['hold_count']} = CASE WHEN {kept} THEN {c['hold_count']} - 1 "
            f"ELSE {c['hold_count']} END, {c['lock_delay']} = CASE WHEN {kept} "
            f"THEN {c['lock_delay']} END WHERE {c['resource']} = %(resource)s "
            f"AND {HELD_BY_OWNER.sql(tables.sql_row)} AND ({kept} "
            f"OR NOT EXISTS (SELECT FROM {tables.waiters_table} w "
            f"WHERE w.{tables.qn('resource')} = %(resource)s)) RETURNING {after}, {now}",
        )


class ReleaseStatement:
    """``release_any``: a release by an owner on ``backend``'s alias. Its one
    row: the answer, the locked row's owner, how many waiters it woke, then
    the exclusive row as released and the shared hold as released or left
    (NULLs where there is none)."""

    def __init__(self, backend: LockBackend) -> None:
        tables, queue, row = backend.tables, backend.queue, LockedRow(backend.tables)
        c, table, pk = tables.column_sql, tables.table, tables.pk_column
        holds, h = tables.holds_table, tables.hold_column_sql
        now, locked, held, shared = row.now, row.cte, row.held, row.shared
        hold_columns = row.hold_columns
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
            "hold_count": f"CASE WHEN {kept} THEN l.{c['hold_count']} - 1 ELSE l.{c['hold_count']} END",
            # The holder's release leaves no lock-delay behind.
            "lock_delay": f"CASE WHEN {kept} THEN l.{c['lock_delay']} END",
        }
        released_columns = ", ".join(
            f"{as_released.get(name, f'l.{column}')} AS {column}" for name, column in c.items()
        )
        exclusive = (
            f"exclusive AS (UPDATE {table} SET "  # noqa: S608
            f"{granting(tables, as_released, 'l.', header_values(queue, 'l.'))} "
            f"FROM locked l LEFT JOIN handed {HANDED} ON TRUE CROSS JOIN grants {SHARED_GRANTS} "
            f"WHERE {table}.{pk} = l.{pk} "
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
        # The releasing hold is the last valid one by the row's count, or, where
        # the others it counts expired unreleased (the count is never smaller
        # than the valid holds, but may be larger), by the holds the statement
        # sees. Those are read in the statement's snapshot, which a hold that
        # joined while the lock waited for the row is not in; a join raises the
        # row's token, so the holds count only while the row locked is the row
        # of the snapshot.
        unchanged = (
            f"EXISTS (SELECT FROM {table} s, locked l WHERE s.{c['resource']} = %(resource)s "
            f"AND s.{c['fencing_token']} = l.{c['fencing_token']} "
            f"AND s.{c['hold_count']} = l.{c['hold_count']})"
        )
        others_valid = (
            f"EXISTS (SELECT FROM {holds} o, my_hold m WHERE o.{h['resource']} = %(resource)s "
            f"AND o.{h['expires_at']} > {now} AND o.{h['id']} <> m.{h['id']})"
        )
        none_other = f"({unchanged} AND NOT {others_valid})"
        # (``frees`` below, decided once in ``freeing``: the shared header is
        # written where a hold is gone, and then it is the last one's release.)
        last = "(SELECT frees FROM freeing)"
        as_left = {
            "hold_count": f"GREATEST({table}.{c['hold_count']} - 1, 0)",
            "owner": f"CASE WHEN {last} THEN '' ELSE {table}.{c['owner']} END",
            "expires_at": f"CASE WHEN {last} THEN {now} ELSE {table}.{c['expires_at']} END",
            "limit": f"CASE WHEN {last} THEN NULL ELSE {table}.{c['limit']} END",
            # (A grant's mark goes with the last hold, as an exclusive release's delay does.)
            "lock_delay": f"CASE WHEN {last} THEN NULL ELSE {table}.{c['lock_delay']} END",
        }
        # Beside the holds left, a permit's grant counts them, and lasts as long as they do.
        beside = header_values(
            queue, table + ".", held=as_left["hold_count"], expires=as_left["expires_at"]
        )
        shared_header = (
            f"shared_header AS (UPDATE {table} SET {granting(tables, as_left, table + '.', beside)} "  # noqa: S608
            f"FROM locked l LEFT JOIN handed {HANDED} ON TRUE CROSS JOIN grants {SHARED_GRANTS} "
            f"WHERE {table}.{pk} = l.{pk} AND EXISTS (SELECT FROM gone) "
            f"RETURNING {table}.{c['owner']} AS left_owner, {table}.{c['limit']} AS left_limit)"
        )
        # The head takes the lock from a release that leaves nobody holding it:
        # the exclusive holder's last hold, or the last valid shared hold.
        frees = (
            f"EXISTS (SELECT FROM locked l WHERE (l.{c['hold_count']} <= 1 "  # noqa: S608
            f"AND {held} AND l.{c['owner']} = %(owner)s) OR ({shared} AND EXISTS "
            f"(SELECT FROM gone) AND (l.{c['hold_count']} <= 1 OR {none_other})))"
        )
        # Released, or a permit freed: a head that reads or wants a permit is
        # granted its hold, with those that fit beside it (``shared_handover``),
        # counting the holds left by the locked row. Decided once, in the CTE
        # ``freeing``, which the hand-over and the grants read: each copy of the
        # SQL would add its nodes to the plan, which every execution starts.
        # (OFFSET 0 keeps ``f`` a subquery: pulled up, each reference to
        # ``frees`` evaluated a copy of its InitPlans.)
        freeing = (
            "freeing AS (SELECT f.frees, f.frees OR f.permit AS room, "  # noqa: S608
            f"CASE WHEN f.frees THEN 0 ELSE GREATEST(l.{c['hold_count']} - 1, 0) END AS beside "
            f"FROM (SELECT {frees} AS frees, EXISTS (SELECT FROM locked l WHERE {shared} "
            f"AND l.{c['limit']} IS NOT NULL AND EXISTS (SELECT FROM gone)) AS permit OFFSET 0) f "
            "LEFT JOIN locked l ON TRUE)"
        )
        grants = shared_handover_sql(
            queue, room="(SELECT room FROM freeing)", beside="(SELECT beside FROM freeing)"
        )
        # Released, or a permit freed: the head of the queue looks, and the
        # readers that fit beside it when it reads.
        freed = (
            f"(SELECT {c['owner']} AS left_owner, {c['limit']} AS left_limit FROM exclusive "  # noqa: S608
            "UNION ALL SELECT left_owner, left_limit FROM shared_header)"
        )
        release_woken = wake_sql(
            "AND (EXISTS (SELECT FROM handed) OR EXISTS (SELECT FROM granted) OR EXISTS "  # noqa: S608
            f"(SELECT FROM {freed} f WHERE f.left_owner = '' OR f.left_limit IS NOT NULL))",
            readers=True,
            grant=grant_notice_sql(tables),
            told=TOLD,
        )
        outcome = (
            f"CASE WHEN NOT {held} OR l.{c['owner']} IS NULL THEN '{NOT_FOUND}' "  # noqa: S608
            f"WHEN EXISTS (SELECT FROM exclusive WHERE {c['owner']} <> '') THEN '{DECREMENTED}' "
            f"WHEN EXISTS (SELECT FROM exclusive) THEN '{RELEASED}' "
            f"WHEN EXISTS (SELECT FROM one_less) THEN '{DECREMENTED}' "
            f"WHEN EXISTS (SELECT FROM gone) THEN '{RELEASED}' "
            f"WHEN {shared} AND {unchanged} AND NOT EXISTS (SELECT FROM {holds} o WHERE "
            f"o.{h['resource']} = %(resource)s AND o.{h['expires_at']} > {now}) THEN '{NOT_FOUND}' "
            f"WHEN {shared} AND NOT EXISTS (SELECT FROM my_hold) THEN '{FORBIDDEN}' "
            f"WHEN {shared} THEN '{PORTABLE}' ELSE '{FORBIDDEN}' END"
        )
        release_head = head_sql(
            queue, resource="%(resource)s", ticket=str(NO_TICKET_EXCLUDED), locked=True
        )
        release = (
            f"{locked}, {my_hold}, {gone}, {freeing}, head AS ({release_head}), "  # noqa: S608
            f"{fitting_sql(queue, holders='(SELECT beside FROM freeing)')}, "
            f"{handed_sql(tables, '(SELECT frees FROM freeing)')}, {grants}, "
            f"{exclusive}, {one_less}, {shared_header} "
            f"SELECT {outcome}, l.{c['owner']}, ({release_woken}), e.*, w.* "
            "FROM (SELECT) one LEFT JOIN locked l ON TRUE LEFT JOIN exclusive e ON TRUE "
            "LEFT JOIN (SELECT * FROM one_less UNION ALL SELECT * FROM gone) w ON TRUE"
        )
        self.statement = Statement("release_any", release)
