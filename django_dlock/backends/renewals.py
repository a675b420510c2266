"""The auto-renewer's batch: every hold a process renews, in one statement per
table (``LockBackend.renew_many``)."""

from __future__ import annotations

from collections.abc import Sequence

from django_dlock.backends.holds import Holds
from django_dlock.backends.results import LockRow
from django_dlock.backends.tables import LockTables
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow

# Holds per statement: well under every database's parameter limit.
RENEW_CHUNK = 500


class Renewals:
    """The renewal statements of one alias: the exclusive holders' in one
    statement (in autocommit), the shared holders' with their resources' rows
    (in a lock transaction)."""

    def __init__(self, tables: LockTables, holds: Holds) -> None:
        self.tables = tables
        self.holds = holds

    def _pairs_sql(self, count: int) -> str:
        """SQL: a list of ``count`` (resource, owner) pairs, for ``(a, b) IN ...``."""
        return f"(VALUES {', '.join(['(%s, %s)'] * count)})"

    def renew_exclusive(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        """The exclusive holds among ``pairs`` that are still valid, renewed to
        ``seconds`` from now."""
        tables = self.tables
        qn = tables.qn
        now_sql, now_params = compile_expression(tables.using, DatabaseNow())
        expires_sql, expires_params = tables.from_now(seconds)
        # Only quoted identifiers and Django-compiled SQL are formatted in.
        sql = (
            f"UPDATE {tables.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
            f"WHERE ({qn('resource')}, {qn('owner')}) IN {self._pairs_sql(len(pairs))} "
            f"AND {qn('expires_at')} > {now_sql} "
            f"RETURNING {', '.join(tables.columns)}, {now_sql}"
        )
        params = [*expires_params, *flat(pairs), *now_params, *now_params]
        renewed = {}
        with tables.connection.cursor() as cursor:
            cursor.execute(sql, params)
            for values in cursor.fetchall():
                row = tables.row(values)
                renewed[(row.resource, row.owner)] = row
        return renewed

    def renew_shared(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        """The shared holds among ``pairs``, renewed; first their resources'
        rows, which admissions lock first too, are made to cover the new
        expiry (only where one of the holds is still valid)."""
        tables = self.tables
        qn = tables.qn
        table, column = tables.holds_table, tables.hold_column_sql
        now_sql, now_params = compile_expression(tables.using, DatabaseNow())
        expires_sql, expires_params = tables.from_now(seconds)
        pairs_sql = self._pairs_sql(len(pairs))
        valid = (
            f"({column['resource']}, {column['owner']}) IN {pairs_sql} "
            f"AND {column['expires_at']} > {now_sql}"
        )
        with tables.connection.cursor() as cursor:
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            cursor.execute(
                f"UPDATE {tables.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
                f"WHERE {qn('owner')} = %s AND {qn('expires_at')} < {expires_sql} "
                f"AND {qn('resource')} IN (SELECT {column['resource']} FROM {table} WHERE {valid})",
                [*expires_params, SHARED_HOLDERS, *expires_params, *flat(pairs), *now_params],
            )
            cursor.execute(
                f"UPDATE {table} SET {column['expires_at']} = {expires_sql} WHERE {valid}",  # noqa: S608
                [*expires_params, *flat(pairs), *now_params],
            )
        renewed = {}
        for resource in dict.fromkeys(resource for resource, _ in pairs):
            for hold in self.holds.valid_holds(resource):
                if (resource, hold.owner) in pairs:
                    renewed[(resource, hold.owner)] = hold
        return renewed


def flat(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The values of (resource, owner) ``pairs``, in order, as parameters."""
    return [value for pair in pairs for value in pair]
