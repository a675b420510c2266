"""The SQL of the lock operations, built by the ORM once per database alias.

A lock operation is four statements, and at this size Django's query building
costs more than the round trips: compiling ``select_for_update().filter()`` and
``update()`` on every call ran at a quarter of the raw-SQL floor. So the ORM
writes each statement once per alias, and the operations execute that SQL and
convert the rows with the converters Django chose for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.models import DurationField, Value

from django_dlock.db import DatabaseNow, compile_expression

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock

_PLACEHOLDER = "django-dlock:placeholder"


class LockStatements:
    """SELECT ... FOR UPDATE, INSERT and UPDATE of ``distributed_locks`` for one alias."""

    def __init__(self, using: str) -> None:
        from django_dlock.models import DistributedLock, FencingFloor

        self.using = using
        self.model = DistributedLock
        connection = connections[using]
        fields = DistributedLock._meta.concrete_fields
        self.attnames = [field.attname for field in fields]
        self.fields = {field.attname: field for field in fields}

        queryset = (
            DistributedLock._default_manager.using(using)
            .select_for_update()
            .filter(resource=_PLACEHOLDER)
            .annotate(db_now=DatabaseNow())
            .order_by()
        )
        compiler = queryset.query.get_compiler(using=using)
        self.select_sql, params = compiler.as_sql()
        selected = [expression for expression, _, _ in compiler.select]
        if list(params) != [_PLACEHOLDER] or len(selected) != len(fields) + 1:
            raise AssertionError(f"unexpected SELECT for {using!r}: {self.select_sql}")
        # {column index: (converters, expression)}; called with the caller's
        # connection, since a connection belongs to one thread.
        self.converters = compiler.get_converters(selected)

        qn = connection.ops.quote_name
        self.table = qn(DistributedLock._meta.db_table)
        self.floor_table = qn(FencingFloor._meta.db_table)
        self.columns = [qn(field.column) for field in fields]
        self.pk_column = qn(DistributedLock._meta.pk.column)

    def select_for_update(self, resource: str) -> DistributedLock | None:
        """The resource's row, locked until commit, with ``db_now`` set to the
        database's time; ``None`` if there is no row."""
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(self.select_sql, [resource])
            row = cursor.fetchone()
        if row is None:
            return None
        values = self._convert(row, connection)
        lock = self.model.from_db(self.using, self.attnames, values[:-1])
        lock.db_now = values[-1]  # type: ignore[attr-defined]
        return lock

    def insert(self, resource: str, owner: str, duration: timedelta) -> DistributedLock | None:
        """Insert the first row of ``resource``; ``None`` if another process won.

        ``ON CONFLICT DO NOTHING`` makes a lost race an empty result rather than
        an IntegrityError that would abort the transaction (a savepoint around
        it would cost two more round trips). The token starts above the largest
        one ever purged.
        """
        connection = connections[self.using]
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(
            self.using, DatabaseNow() + Value(duration, output_field=DurationField())
        )
        qn = connection.ops.quote_name
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"INSERT INTO {self.table} ({', '.join(self.columns[1:])}) "  # noqa: S608
            f"VALUES (%s, %s, {now_sql}, {expires_sql}, "
            f"COALESCE((SELECT MAX({qn('value')}) FROM {self.floor_table}), 0) + 1) "
            f"ON CONFLICT ({qn('resource')}) DO NOTHING "
            f"RETURNING {', '.join(self.columns)}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [resource, owner, *now_params, *expires_params])
            row = cursor.fetchone()
        if row is None:
            return None
        lock = self.model.from_db(self.using, self.attnames, self._convert(row, connection))
        lock.db_now = lock.acquired_at  # type: ignore[attr-defined]
        return lock

    def update(self, lock: DistributedLock, attnames: Sequence[str]) -> None:
        """Write ``lock``'s values of ``attnames`` to its row."""
        connection = connections[self.using]
        sql = self._update_sql(tuple(attnames))
        values = [
            self.fields[name].get_db_prep_save(getattr(lock, name), connection) for name in attnames
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, lock.pk])

    def _update_sql(self, attnames: tuple[str, ...]) -> str:
        qn = connections[self.using].ops.quote_name
        assignments = ", ".join(f"{qn(self.fields[name].column)} = %s" for name in attnames)
        return f"UPDATE {self.table} SET {assignments} WHERE {self.pk_column} = %s"  # noqa: S608

    def _convert(self, row: Sequence[Any], connection: Any) -> list[Any]:
        values = list(row)
        for index, (converters, expression) in self.converters.items():
            if index < len(values):
                for converter in converters:
                    values[index] = converter(values[index], expression, connection)
        return values


@cache
def statements_for(using: str, vendor: str) -> LockStatements:
    """The statements of ``using`` (``vendor`` is in the key so that tests that
    swap a database's settings never get another backend's SQL)."""
    return LockStatements(using)
