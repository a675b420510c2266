"""MariaDB's renewals: no ``VALUES`` list in ``IN``, no ``UPDATE ... RETURNING``."""

from __future__ import annotations

from collections.abc import Sequence

from django_dlock.backends.renewals import Renewals, flat
from django_dlock.backends.results import LockRow
from django_dlock.django_private import compile_expression
from django_dlock.rules.clock import DatabaseNow


class MySQLRenewals(Renewals):
    def _pairs_sql(self, count: int) -> str:
        return f"({', '.join(['(%s, %s)'] * count)})"

    def renew_exclusive(
        self, pairs: Sequence[tuple[str, str]], seconds: float
    ) -> dict[tuple[str, str], LockRow]:
        # MySQL has no UPDATE ... RETURNING: an UPDATE, then a SELECT of the
        # locks that are still valid and still the same owner's, which are the
        # renewed ones (a lock released or taken over in between is not
        # reported, as if it had not been renewed).
        tables = self.tables
        qn = tables.qn
        now_sql, now_params = compile_expression(tables.using, DatabaseNow())
        expires_sql, expires_params = tables.from_now(seconds)
        where = (
            f"({qn('resource')}, {qn('owner')}) IN {self._pairs_sql(len(pairs))} "
            f"AND {qn('expires_at')} > {now_sql}"
        )
        values = flat(pairs)
        renewed: dict[tuple[str, str], LockRow] = {}
        with tables.connection.cursor() as cursor:
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            cursor.execute(
                f"UPDATE {tables.table} SET {qn('expires_at')} = {expires_sql} WHERE {where}",  # noqa: S608
                [*expires_params, *values, *now_params],
            )
            select = (
                f"SELECT {', '.join(tables.columns)}, {now_sql} FROM {tables.table} WHERE {where}"  # noqa: S608
            )
            cursor.execute(select, [*now_params, *values, *now_params])
            for selected in cursor.fetchall():
                row = tables.row(selected)
                renewed[(row.resource, row.owner)] = row
        return renewed
