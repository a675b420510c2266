"""The SQL of PostgreSQL's statements that find the head of a queue and wake
it: the head (``head_sql``), the waiters that fit beside it (``fitting_sql``),
and the ``NOTIFY`` on their processes' channels (``wake_sql``)."""

from __future__ import annotations

from django_dlock.backends.queue import WaiterQueue
from django_dlock.rules import EXCLUSIVE, SHARED
from django_dlock.rules.predicates import MAY_JOIN


def head_sql(
    queue: WaiterQueue,
    condition: str = "",
    *,
    resource: str = "%s",
    ticket: str = "%s",
    locked: bool = False,
) -> str:
    """The head of the queue of ``resource`` (a placeholder), other than
    ``ticket`` (one), if ``condition`` (SQL) holds (``WaiterQueue.head_sql``):
    its ticket, channel and what it wants."""
    qn = queue.tables.qn
    columns = ", ".join(f"w.{qn(name)} AS {qn(name)}" for name in HEAD_COLUMNS)
    return queue.head_sql(columns, condition, resource=resource, ticket=ticket, locked=locked)


# The columns of the CTE ``head``: who the head is, how to wake it, what it
# wants, and of which resource ("limit", a reserved word, is read quoted).
HEAD_COLUMNS = ("id", "channel", "owner", "ttl", "label", "mode", "resource", "limit")


def wake_sql(condition: str = "", *, readers: bool = False, grant: str = "", told: str = "") -> str:
    """SQL: NOTIFY the head of the queue (the CTE ``head``) on its process's
    channel, with its ticket (and ``grant``, SQL: the text of the grant the
    statement made it, or NULL: ``handover.grant_notice_sql``), if
    ``condition`` (SQL, ``AND ...``) holds; with
    ``readers``, also the readers that fit beside a head that reads (the CTE
    ``fitting``, ``fitting_sql``). A waiter that polls (no channel) is not
    notified. ``told`` (a CTE's name, ``shared_handover``): the waiters the
    statement granted shared holds, each told its own grant (``rules.notice``)
    rather than woken to look. Its value: how many were woken."""
    # (OFFSET 0 keeps the filter in its subquery, ahead of the call: pg_notify()
    # refuses an empty channel.)
    head = f"id::text || COALESCE({grant}, '')" if grant else "id::text"
    # (The uncorrelated NOT EXISTS, evaluated once, spares the hash of ``told``
    # where the statement told nobody.)
    untold = (
        f" AND (NOT EXISTS (SELECT FROM {told}) OR id NOT IN (SELECT id FROM {told}))"  # noqa: S608
        if told
        else ""
    )
    woken = f"SELECT {head} AS payload, channel FROM head WHERE channel <> '' {condition}{untold}"  # noqa: S608
    if readers:
        woken += f" UNION ALL SELECT id::text, channel FROM fitting WHERE TRUE {condition}{untold}"  # noqa: S608
    if told:
        woken += f" UNION ALL SELECT id::text || notice, channel FROM {told}"  # noqa: S608
    return (
        f"SELECT COUNT(*) FROM ({woken} OFFSET 0) h, "  # noqa: S608
        "LATERAL pg_notify(h.channel, h.payload)"
    )


def fitting_sql(queue: WaiterQueue, *, holders: str = "") -> str:
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
    the statement's snapshot sees.)

    With ``holders`` (SQL: the holds left beside the head, counted under the
    row's lock, never fewer than are valid, in place of the snapshot's), they are also the waiters a release may grant a hold beside
    the head (``shared_handover``), with what each wants."""
    qn = queue.tables.qn
    between = queue.queued_before_sql("head.resource", f"w.{qn('id')}", after="head.id", alias="x")
    beside = holders or f"({queue.holders_sql('head.resource')})"
    # The waiter ``w`` may join (``MAY_JOIN``) beside the head, whose hold counts.
    joins = MAY_JOIN.sql(
        queue.tables.sql_row.spelling(
            limit=f"w.{qn('limit')}",
            writers_ahead=f"(SELECT COUNT(*) {between} AND x.{qn('mode')} = '{EXCLUSIVE}')",
            ahead=f"(SELECT COUNT(*) {between})",
            holders=f"(({beside}) + 1)",
        )
    )
    shared = f"head.{qn('mode')} = '{SHARED}' AND w.{qn('mode')} = '{SHARED}'"
    wants = "".join(f", w.{qn(column)} AS {qn(column)}" for column in GRANTED_COLUMNS)
    return (
        f"fitting AS (SELECT w.{qn('id')} AS id, w.{qn('channel')} AS channel"  # noqa: S608
        f"{wants if holders else ''} "
        f"FROM head JOIN {queue.tables.waiters_table} w ON w.{qn('resource')} = head.resource "
        f"AND w.{qn('id')} > head.id WHERE {shared} "
        f"AND w.{qn('limit')} IS NOT DISTINCT FROM head.{qn('limit')} AND {joins} "
        f"AND w.{qn('channel')} <> '' "
        f"AND {queue.live_waiter_sql('w.')})"
    )


# What a granted waiter's hold is written from: who, for how long, as what.
GRANTED_COLUMNS = ("owner", "ttl", "label", "limit")


# No waiter has this ticket: mark_released() excludes none from the head.
NO_TICKET_EXCLUDED = 0
