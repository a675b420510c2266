"""PostgreSQL's told grant to readers and permits (issue 46): the release that
frees room (the lock released, or a permit) gives the head of the queue, when
it wants a shared hold, and the waiters that fit beside it their holds, in the
release's own statement, and tells each its grant in its ``NOTIFY``
(``rules.notice``), as it hands the lock to an exclusive head (``handover``).
Each starts on its notice alone (``locking.told``).

Who fits is the rule SQLite's ``backends.shared_grants`` reads, in SQL: the
head, if it ``MAY_JOIN`` beside the holds left; then each waiter behind it that
``MAY_JOIN`` beside the head (``wake.fitting_sql``, the waiters between counted
as ahead). Only a waiter that listens, lives (``live_waiter_sql``) and says its
ttl is granted; one that does not counts as ahead meanwhile. The holds left are
counted by the locked row (its ``hold_count`` less the one released, never
fewer than are valid), not by the statement's snapshot: a grant never puts a
permit over the limit. Each hold is for the offer lease (``OFFER_LEASE``, or
the ttl where shorter) with a token of its own (the row's next, by ticket
order); the resource's row is marked as the exclusive grant's is
(``rules.grant``: lock-delay ``GRANT_MARK``, its start the grant's), so that an
operator's release of every hold before the waiters could have started revokes
them (``shared_release``).
"""

from __future__ import annotations

from functools import cached_property

from django_dlock.backends.postgresql.handover import SHARED_GRANTS, micros
from django_dlock.backends.postgresql.wake import GRANTED_COLUMNS
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.results import LockRow
from django_dlock.backends.shared_grants import READ_AT_MOST, SharedGrants
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED, SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.grant import OFFER_LEASE
from django_dlock.rules.predicates import MAY_JOIN

# The CTE of the waiters granted, each with its notice: (id, channel, notice).
TOLD = "told"


def shared_handover_sql(queue: WaiterQueue, *, room: str, beside: str) -> str:
    """SQL: the CTEs that grant the shared holds, after ``head`` (locked),
    ``locked`` and ``fitting`` (``wake.fitting_sql`` with ``holders``): where ``room`` (SQL: the release frees the lock or a permit),
    the head and those that fit beside it, ``beside`` (SQL: the valid holds
    left, counted under the row's lock) and the head counted, get their holds;
    their tickets go. ``TOLD`` names each with its notice, and ``grants`` (one
    row: how many, until when, which limit) is what the header is written from
    (``header_values``)."""
    tables = queue.tables
    qn, c, holds, h = tables.qn, tables.column_sql, tables.holds_table, tables.hold_column_sql
    now, _ = compile_expression(tables.using, DatabaseNow())
    head_joins = MAY_JOIN.sql(
        tables.sql_row.spelling(
            limit=f"head.{qn('limit')}", holders=f"({beside})", ahead="0", writers_ahead="0"
        )
    )

    # A waiter whose owner holds already (an explicit owner's other hold) is not
    # granted: a new hold would replace that one (``SharedGrants._fitting``).
    def holds_none(owner: str) -> str:
        return (
            f"NOT EXISTS (SELECT FROM {holds} o WHERE o.{h['resource']} = %(resource)s "
            f"AND o.{h['owner']} = {owner} AND o.{h['expires_at']} > {now})"
        )

    # The head: a reader or a permit that listens, says its ttl, and fits (of
    # the kind of the holds left, where any are). (The uncorrelated EXISTS,
    # first, is a filter evaluated once, before ``room``: a writer at the head
    # reads nothing more.)
    head_grant = (
        f"head_grant AS (SELECT head.id, head.owner FROM head, locked l "  # noqa: S608
        f"WHERE EXISTS (SELECT FROM head WHERE head.mode = '{SHARED}') AND head.mode = '{SHARED}' "
        f"AND head.channel <> '' AND head.ttl IS NOT NULL AND ({room}) AND (({beside}) = 0 "
        f"OR head.{qn('limit')} IS NOT DISTINCT FROM l.{c['limit']}) AND {head_joins} "
        f"AND {holds_none('head.owner')})"
    )
    # Beside it, one waiter per owner (the first in line), none of the head's.
    beside_head = (
        "SELECT f.id FROM fitting f, head_grant g WHERE f.ttl IS NOT NULL "  # noqa: S608
        "AND f.owner <> g.owner AND NOT EXISTS (SELECT FROM fitting e "
        f"WHERE e.owner = f.owner AND e.id < f.id) AND {holds_none('f.owner')}"
    )
    # Deleted under the row's lock: a waiter that left meanwhile is not granted.
    wants = ", ".join(f"w.{qn(column)} AS {qn(column)}" for column in GRANTED_COLUMNS)
    # By their keys, as an array, in the resource's queue (its index: the
    # generic plan of ``= ANY(ARRAY(...))`` alone scanned the whole table).
    # Nobody is granted unless the head is: the uncorrelated EXISTS is one
    # filter evaluated once (an InitPlan), so the release whose head is a
    # writer, or that has none, neither chooses nor scans.
    granted = (
        f"granted AS (DELETE FROM {tables.waiters_table} w WHERE EXISTS (SELECT FROM head_grant) "  # noqa: S608
        f"AND w.{qn('resource')} = %(resource)s AND w.{qn('id')} = ANY(ARRAY("
        f"SELECT id FROM head_grant UNION ALL {beside_head})) RETURNING w.{qn('id')} AS id, "
        f"w.{qn('channel')} AS channel, {wants})"
    )
    # What follows reads only what ``granted`` returned, each gated by the same
    # filter evaluated once: where the head was not granted, none of it runs
    # (the numbering's sort, the INSERT, the notices, the summary's scan).
    granting = "EXISTS (SELECT FROM head_grant)"
    lease = f"LEAST(n.ttl, make_interval(secs => {OFFER_LEASE}))"
    in_line = "n.id"  # the queue's order (``IS_HEAD``'s): the tokens follow it
    numbered = (
        "numbered AS (SELECT n.*, "  # noqa: S608
        f"l.{c['fencing_token']} + ROW_NUMBER() OVER (ORDER BY {in_line}) AS token, "
        f"{now} AS since, {now} + {lease} AS until FROM granted n, locked l)"
    )
    names = (
        "resource", "owner", "label", "acquired_at", "expires_at", "hold_count",
        "fencing_token", "limit",
    )  # fmt: skip
    # (An expired hold of the same owner is written over, as a new take's is.)
    replaced = ", ".join(
        f"{h[name]} = EXCLUDED.{h[name]}" for name in names if name not in ("resource", "owner")
    )
    new_holds = (
        f"new_holds AS (INSERT INTO {holds} ({', '.join(h[name] for name in names)}) "  # noqa: S608
        f"SELECT %(resource)s, n.owner, n.label, n.since, n.until, 1, n.token, n.{qn('limit')} "
        f"FROM numbered n WHERE {granting} ON CONFLICT ({h['resource']}, {h['owner']}) DO UPDATE SET {replaced} "
        f"RETURNING {holds}.{h['id']} AS id, {holds}.{h['fencing_token']} AS token)"
    )
    told = (
        f"{TOLD} AS (SELECT n.id, n.channel, ' ' || k.id || ' ' || n.token || ' ' || "  # noqa: S608
        f"{micros('n.since')} || ' ' || {micros('n.until')} AS notice "
        f"FROM numbered n JOIN new_holds k ON k.token = n.token WHERE {granting})"
    )
    summary = (
        f"grants AS (SELECT COUNT(*) AS n, MAX(until) AS until, MAX(n.{qn('limit')}) AS lim "  # noqa: S608
        f"FROM numbered n WHERE {granting})"
    )
    return f"{head_grant}, {granted}, {numbered}, {new_holds}, {told}, {summary}"


def header_values(
    queue: WaiterQueue, row: str, *, held: str = "", expires: str = ""
) -> dict[str, str]:
    """SQL by attname: the header of the shared holds a release granted, for
    ``handover.granting`` (its UPDATE joins ``grants`` as ``SHARED_GRANTS``),
    ``row`` the row's alias and dot; ``held`` (SQL: the count of the holds left)
    and ``expires`` (SQL: their expiry) where holds are left beside them."""
    tables = queue.tables
    c, sg = tables.column_sql, SHARED_GRANTS
    now, _ = compile_expression(tables.using, DatabaseNow())
    return {
        "owner": f"'{SHARED_HOLDERS}'",
        "label": "''",
        "acquired_at": now,  # the grant's start (``rules.grant``)
        "expires_at": f"GREATEST({expires}, {sg}.until)" if expires else f"{sg}.until",
        "fencing_token": f"{row}{c['fencing_token']} + {sg}.n",
        "hold_count": f"{held} + {sg}.n" if held else f"{sg}.n",
        "limit": f"{sg}.lim",
        "lock_delay": "make_interval()",  # ``GRANT_MARK``
    }


class PortableGrants:
    """The portable operation's told grant on PostgreSQL (its release's
    ``mark_released``, a permit's ``permit_freed``): the head of the queue and
    those that fit beside it get their holds from ``backends.shared_grants``
    (the portable writes), and each is told its grant in a ``NOTIFY``, sent as
    the lock transaction commits. The live waiters it may read are locked
    first, in the queue's order: a waiter that leaves meanwhile (its ``DELETE``
    in flight) is waited for and passed over, never granted."""

    def __init__(self, queue: WaiterQueue, grants: SharedGrants) -> None:
        self.queue = queue
        self.grants = grants

    @cached_property
    def _queue_sql(self) -> str:
        tables = self.queue.tables
        in_line = f"w.{tables.qn('id')}"  # the queue's order (``IS_HEAD``'s)
        return (
            f"SELECT {in_line} FROM {tables.waiters_table} w "  # noqa: S608
            f"WHERE w.{tables.qn('resource')} = %s AND {self.queue.live_waiter_sql('w.')} "
            f"ORDER BY {in_line} LIMIT {READ_AT_MOST} FOR UPDATE OF w"
        )

    def grant(self, header: LockRow, held: list[LockRow] | None = None) -> bool:
        """Grant the waiters that fit from the head of the queue of ``header``'s
        resource their holds, beside ``held`` (None: the lock came free), and
        tell them; whether any was granted (else nothing was written)."""
        with self.queue.tables.connection.cursor() as cursor:
            cursor.execute(self._queue_sql, [header.resource])
            queued = cursor.fetchall()
            if not queued:
                return False
            # The queue's liveness is read in SQL (``live_waiter_sql``).
            told = self.grants.grant(header, int(queued[0][0]), lambda _channel: True, held)
            for granted in told:
                cursor.execute("SELECT pg_notify(%s, %s)", [granted.channel, granted.payload])
        return bool(told)
