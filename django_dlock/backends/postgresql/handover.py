"""The hand-over on release: the statement that frees a resource makes the
head of its queue the holder, when the head listens and wants it exclusively.

The head then starts on the grant its wake-up tells (``locking.told``; the
grant is for ``OFFER_LEASE`` until its renewer extends it), or, told too
late, only takes the offer (``LockBackend.granted``), instead of sending an
acquisition of its own after its wake-up: otherwise a hand-over would be the
release, the NOTIFY, and the head's acquire, one round trip after the other
while nobody holds the lock. As on SQLite, the grant is the head's claim as
its ticket says it (owner, ttl, label), with the next fencing token; the
waiter's ticket is deleted in the same statement, and a wait that ends
meanwhile gives the lock back (``Wait.finish``).

The head is locked (``FOR UPDATE``) as it is read: a waiter that leaves the
queue while the release runs (its ``DELETE`` committed after the release's
snapshot was taken) is skipped, and the next live waiter is the head. So the
lock never goes to a waiter that left, and a release never names one that
will not look. A head whose listener's server process is gone is not live
(``PostgreSQLQueue.live_waiter_sql``): a waiter killed while queued is passed over.
"""

from __future__ import annotations

from collections.abc import Mapping

from django_dlock.backends.tables import LockTables
from django_dlock.django_private import compile_expression
from django_dlock.rules import EXCLUSIVE
from django_dlock.rules.clock import DatabaseNow
from django_dlock.rules.grant import OFFER_LEASE

# The alias of the ``handed`` CTE in a header's UPDATE (``FROM ... LEFT JOIN handed g``).
HANDED = "g"
# The alias of ``shared_handover``'s one-row summary of the shared holds granted.
SHARED_GRANTS = "sg"


def handed_sql(tables: LockTables, frees: str) -> str:
    """SQL: the CTE ``handed``: the ticket of the head (the CTE ``head``,
    ``head_sql(locked=True)``) deleted, when ``frees`` (SQL: the statement leaves
    the resource free) and the head can take the lock this way; its owner,
    ttl and label."""
    qn = tables.qn
    return (
        f"handed AS (DELETE FROM {tables.waiters_table} w USING head "  # noqa: S608
        f"WHERE w.{qn('id')} = head.id AND head.channel <> '' AND head.ttl IS NOT NULL "
        f"AND head.mode = '{EXCLUSIVE}' AND ({frees}) "
        f"RETURNING w.{qn('owner')} AS owner, w.{qn('ttl')} AS ttl, w.{qn('label')} AS label)"
    )


def _lease_end(now: str) -> str:
    """SQL: the offer's expiry: ``OFFER_LEASE`` from ``now``, or the head's ttl where shorter."""
    return f"{now} + LEAST({HANDED}.ttl, make_interval(secs => {OFFER_LEASE}))"


def micros(moment: str) -> str:
    """SQL: ``moment`` (SQL, a timestamp) in microseconds since the epoch (``rules.notice``)."""
    return f"CAST(EXTRACT(EPOCH FROM {moment}) * 1000000 AS BIGINT)"


def grant_notice_sql(tables: LockTables) -> str:
    """SQL: the grant that ``granting`` writes, as the text its ``NOTIFY``
    appends to the head's ticket (``rules.notice``), so that the head starts
    on the notification alone; NULL where the release handed nothing over.
    (``STATEMENT_TIMESTAMP()``, the database's now, is one value in a statement.)"""
    c, pk = tables.column_sql, tables.pk_column
    now, _ = compile_expression(tables.using, DatabaseNow())
    return (
        f"(SELECT ' ' || l.{pk} || ' ' || (l.{c['fencing_token']} + 1) || ' ' || "  # noqa: S608
        f"{micros(now)} || ' ' || {micros(_lease_end(now))} FROM locked l, handed {HANDED})"
    )


def granting(
    tables: LockTables,
    released: Mapping[str, str],
    row: str,
    shared: Mapping[str, str] | None = None,
) -> str:
    """SQL: the assignments of a header's UPDATE that joins ``handed`` as
    ``g``: the head's grant where there is one, else ``released`` (attname:
    SQL) and, for the other columns, the row (``row``, a table alias and dot)
    as it is. With ``shared`` (attname: SQL, every column; the UPDATE joins
    ``shared_handover``'s summary as ``SHARED_GRANTS``): the header of the
    shared holds the release granted, where it granted any."""
    c = tables.column_sql
    now, _ = compile_expression(tables.using, DatabaseNow())
    grant = {
        "owner": f"{HANDED}.owner",
        "label": f"{HANDED}.label",
        "acquired_at": now,
        "expires_at": _lease_end(now),
        "fencing_token": f"{row}{c['fencing_token']} + 1",
        "hold_count": "1",
        # Typed: a CASE of NULLs alone would be text.
        "limit": f"CAST(NULL AS {tables.fields['limit'].db_type(tables.connection)})",
        # The mark of a grant (``rules.grant.GRANT_MARK``, a zero delay): an
        # operator's release of it before its head confirmed it revokes it.
        # The head writes its own delay as it takes the offer.
        "lock_delay": "make_interval()",
    }

    def shared_branch(name: str) -> str:
        return f"WHEN {SHARED_GRANTS}.n > 0 THEN {shared[name]} " if shared else ""

    return ", ".join(
        f"{c[name]} = CASE WHEN {HANDED}.owner IS NOT NULL THEN {value} "
        f"{shared_branch(name)}ELSE {released.get(name, row + c[name])} END"
        for name, value in grant.items()
    )
