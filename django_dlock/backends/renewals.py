"""The auto-renewer's batch: every hold a process renews, in one statement per
table (``renew_many``)."""

from __future__ import annotations

from collections.abc import Sequence

from django_dlock.backends.clock import DatabaseNow
from django_dlock.backends.holds import HoldStatements
from django_dlock.backends.queue import WaiterQueue
from django_dlock.backends.results import LockRow
from django_dlock.backends.statements import LockStatements
from django_dlock.django_private import compile_expression
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.transactions import in_lock_transaction

# Holds per statement: well under every database's parameter limit.
RENEW_CHUNK = 500


class Renewals(LockStatements, HoldStatements, WaiterQueue):
    """The renewals of a ``LockBackend``."""

    def renew_many(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        """Extend each (resource, owner) hold that owner validly has to
        ``seconds`` from now; the renewed holds. The exclusive holders' in one
        statement per ``RENEW_CHUNK`` (in autocommit), then the shared holders'
        with their resources' rows (a lock transaction)."""
        renewed: dict[tuple[str, str], LockRow] = {}
        for start in range(0, len(pairs), RENEW_CHUNK):
            chunk = pairs[start : start + RENEW_CHUNK]
            renewed.update(self._renew_exclusive(chunk, seconds))
            shared = [pair for pair in chunk if pair not in renewed]
            if shared:
                renewed.update(self._renew_shared_in_transaction(shared, seconds))
        return renewed

    def _renew_shared_in_transaction(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        return in_lock_transaction(self, lambda: self._renew_shared(pairs, seconds))

    def _pairs_sql(self, count: int) -> str:
        """SQL: a list of ``count`` (resource, owner) pairs, for ``(a, b) IN ...``."""
        return f"(VALUES {', '.join(['(%s, %s)'] * count)})"

    def _renew_exclusive(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        qn = self.qn
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        # Only quoted identifiers and Django-compiled SQL are formatted in.
        sql = (
            f"UPDATE {self.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
            f"WHERE ({qn('resource')}, {qn('owner')}) IN {self._pairs_sql(len(pairs))} "
            f"AND {qn('expires_at')} > {now_sql} "
            f"RETURNING {', '.join(self.columns)}, {now_sql}"
        )
        params = [*expires_params, *_flat(pairs), *now_params, *now_params]
        renewed = {}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            for values in cursor.fetchall():
                row = self._row(values)
                renewed[(row.resource, row.owner)] = row
        return renewed

    def _renew_shared(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        """The shared holds among ``pairs``, renewed; first their resources'
        rows, which admissions lock first too, are made to cover the new
        expiry (only where one of the holds is still valid)."""
        qn = self.qn
        table, _, column = self._hold_names
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = self._from_now(seconds)
        pairs_sql = self._pairs_sql(len(pairs))
        valid = (
            f"({column['resource']}, {column['owner']}) IN {pairs_sql} "
            f"AND {column['expires_at']} > {now_sql}"
        )
        with self.connection.cursor() as cursor:
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            cursor.execute(
                f"UPDATE {self.table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
                f"WHERE {qn('owner')} = %s AND {qn('expires_at')} < {expires_sql} "
                f"AND {qn('resource')} IN (SELECT {column['resource']} FROM {table} WHERE {valid})",
                [*expires_params, SHARED_HOLDERS, *expires_params, *_flat(pairs), *now_params],
            )
            cursor.execute(
                f"UPDATE {table} SET {column['expires_at']} = {expires_sql} WHERE {valid}",  # noqa: S608
                [*expires_params, *_flat(pairs), *now_params],
            )
        renewed = {}
        for resource in dict.fromkeys(resource for resource, _ in pairs):
            for hold in self.valid_holds(resource):
                if (resource, hold.owner) in pairs:
                    renewed[(resource, hold.owner)] = hold
        return renewed


def _flat(pairs: Sequence[tuple[str, str]]) -> list[str]:
    return [value for pair in pairs for value in pair]
