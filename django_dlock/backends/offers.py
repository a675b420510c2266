"""Taking a hand-over's offer (``LockBackend.granted``).

Where releases hand the lock over (``features.grants_on_release``), a release
makes the head of the queue the holder for a short lease (``OFFER_LEASE``)
and drops its ticket; the head, woken, starts on the grant its wake-up tells
(``locking.told``), or, told too late to trust the lease, takes the offer with
one autocommit ``UPDATE`` that extends the lease to its own duration (as its
renewer extends a told grant). An offer that lapsed
(the waiter was paused) was never the waiter's: its lease ran out, and the
next waiter took the lock or may.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from django_dlock.backends.lock_rows import LockRows
from django_dlock.backends.results import LockRow
from django_dlock.backends.tables import LockTables
from django_dlock.django_private import compile_expression
from django_dlock.rules.clock import now_plus
from django_dlock.rules.predicates import HELD_BY_OWNER

__all__ = ["Offers"]


class Offers:
    """The statement that takes a hand-over's offer, on one alias."""

    def __init__(self, tables: LockTables, rows: LockRows) -> None:
        self.tables = tables
        self.rows = rows

    def take(
        self,
        resource: str,
        owner: str,
        ticket: int,
        duration: timedelta,
        lock_delay: timedelta | None,
    ) -> LockRow | None:
        """The lock, if a release handed it to the waiter of ``ticket`` and its
        offer still stands (held by ``owner``, the ticket gone): now the
        waiter's for ``duration`` from now, with its ``lock_delay`` (the release
        wrote none). None when the offer lapsed or was never made."""
        tables = self.tables
        qn = tables.qn
        rule_row = tables.sql_row
        expires_sql, expires_params = compile_expression(tables.using, now_plus(duration))
        mine = HELD_BY_OWNER.sql(replace(rule_row, placeholders={"owner": "%s"}))
        # Only quoted identifiers and Django-compiled SQL are formatted in.
        sql = (
            f"UPDATE {tables.table} SET {qn('expires_at')} = {expires_sql}, "  # noqa: S608
            f"{qn('lock_delay')} = %s WHERE {qn('resource')} = %s AND {mine} AND NOT EXISTS "
            f"(SELECT 1 FROM {tables.waiters_table} w WHERE w.{qn('id')} = %s) "
            f"RETURNING {', '.join(tables.columns)}, {rule_row.now}"
        )
        delay = self.rows.duration_value(lock_delay)
        params = [*expires_params, delay, resource, owner, ticket]
        return tables.fetch_row(sql, params)
