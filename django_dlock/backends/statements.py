"""The statements of the portable lock operations (``LockBackend``), written by
the ORM once per database alias.

A lock operation is a handful of statements, and at this size Django's query
building costs more than the round trips: compiling ``select_for_update()`` and
``update()`` on every call costs more than running the statement
(docs/performance.md, "Where the code's choices come from"). So the ORM writes
each statement once per alias, and the operations execute that SQL and convert
the rows with the converters Django chose for them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model, QuerySet

from django_dlock.backends.clock import DatabaseNow, now_plus
from django_dlock.backends.results import LOCK_FIELDS, LockRow
from django_dlock.django_private import Converters, compile_expression, compile_select

_PLACEHOLDER = "django-dlock:placeholder"


class LockStatements:
    """The SQL of one alias's lock rows: names, compiled statements, conversions."""

    model: type[Model]
    floor_model: type[Model]
    waiter_model: type[Model]

    def __init__(self, using: str) -> None:
        self.using = using
        # Looked up by name: the models module imports the manager, which imports this.
        self.model = apps.get_model("django_dlock", "DistributedLock")
        self.floor_model = apps.get_model("django_dlock", "FencingFloor")
        self.waiter_model = apps.get_model("django_dlock", "LockWaiter")
        fields = self.model._meta.concrete_fields
        self.attnames = [field.attname for field in fields]
        if set(self.attnames) != set(LOCK_FIELDS):  # LockRow and the model must agree
            raise AssertionError(f"LockRow does not match the model's fields: {self.attnames}")
        self.fields = {field.attname: field for field in fields}
        qn = connections[using].ops.quote_name
        self.qn = qn
        self.table = qn(self.model._meta.db_table)
        self.floor_table = qn(self.floor_model._meta.db_table)
        # {attname: quoted column}, in the model's field order
        self.column_sql = {
            field.attname: qn(field.column) for field in fields if field.column is not None
        }
        self.columns = list(self.column_sql.values())
        self.pk_column = self.column_sql[self.model._meta.pk.attname]

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    # -- the transaction -----------------------------------------------------------

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None:
        """Seconds to pause before ``in_lock_transaction`` runs a lock transaction
        again that failed with ``error`` (its ``attempt``-th, the first begun at
        ``time.monotonic()`` ``started``); ``None``: raise ``error``."""
        return None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Wrap the start of a lock transaction (a vendor may change how it begins)."""
        yield

    @cached_property
    def _select_sql(self) -> str:
        """The SELECT ... FOR UPDATE of a resource's row: its columns, then the
        database's now. Compiled on first use, which is inside a lock
        transaction: Django compiles ``select_for_update()`` only there."""
        sql, params = self._compiled(self._row_query().select_for_update())[:2]
        if list(params) != [_PLACEHOLDER]:
            raise AssertionError(f"unexpected SELECT for {self.using!r}: {sql}")
        return sql

    @cached_property
    def _read_sql(self) -> str:
        """The same SELECT without a row lock, for reads outside a transaction."""
        return self._compiled(self._row_query())[0]

    @cached_property
    def _converters(self) -> Converters:
        """{column index: (converters, expression)} of a row and the database's
        now, as Django converts them (SQLite's text to datetimes)."""
        return self._compiled(self._row_query())[2]

    def _row_query(self) -> QuerySet[Any]:
        queryset: QuerySet[Any] = (
            self.model._default_manager.using(self.using)
            .filter(resource=_PLACEHOLDER)
            .annotate(db_now=DatabaseNow())
            .order_by()
        )
        return queryset

    def _compiled(self, queryset: QuerySet[Any]) -> tuple[str, list[Any], Converters]:
        sql, params, columns, converters = compile_select(queryset)
        if columns != len(self.attnames) + 1:
            raise AssertionError(f"unexpected SELECT for {self.using!r}: {sql}")
        # Converters are called with the caller's connection: a connection
        # belongs to one thread.
        return sql, params, converters

    def select_for_update(self, resource: str) -> LockRow | None:
        """The resource's row, locked until commit; ``None`` if there is none."""
        return self._fetch_row(self._select_sql, [resource])

    def _fetch_row(self, sql: str, params: Sequence[Any]) -> LockRow | None:
        """The lock row ``sql`` (the columns of ``_select_sql``) returns."""
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else self._row(row)

    def insert(
        self,
        resource: str,
        owner: str,
        duration: timedelta,
        *,
        label: str = "",
        limit: int | None = None,
    ) -> LockRow | None:
        """Insert the first row of ``resource``, held by ``owner`` (or
        ``SHARED_HOLDERS``, then with a semaphore's ``limit``); ``None`` if
        another process won.

        ``ON CONFLICT DO NOTHING`` makes a lost race an empty result rather than
        an IntegrityError that would abort the transaction (a savepoint around
        it would cost two more round trips). The token starts above the largest
        one ever purged.
        """
        columns, placeholders, params = self._insert_values(resource, owner, duration, label, limit)
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"INSERT INTO {self.table} ({columns}) VALUES ({placeholders}) "  # noqa: S608
            f"ON CONFLICT ({self.column_sql['resource']}) DO NOTHING "
            f"RETURNING {', '.join(self.columns)}, {now_sql}"
        )
        return self._fetch_row(sql, [*params, *now_params])

    def _insert_values(
        self, resource: str, owner: str, duration: timedelta, label: str, limit: int | None
    ) -> tuple[str, str, list[Any]]:
        """The column list, VALUES and parameters of a first row of ``resource``:
        the database's time, and a token above the largest one ever purged."""
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(self.using, now_plus(duration))
        # Each column named with its value: the model's field order does not matter.
        values: dict[str, tuple[str, list[Any]]] = {
            "resource": ("%s", [resource]),
            "owner": ("%s", [owner]),
            "acquired_at": (now_sql, now_params),
            "expires_at": (expires_sql, expires_params),
            "fencing_token": (f"COALESCE(({self._floor_sql()}), 0) + 1", []),
            "hold_count": ("%s", [1]),
            "label": ("%s", [label]),
            "limit": ("%s", [limit]),
        }
        columns = ", ".join(self.column_sql[name] for name in values)
        placeholders = ", ".join(sql for sql, _ in values.values())
        params = [param for _, value_params in values.values() for param in value_params]
        return columns, placeholders, params

    def _floor_sql(self) -> str:
        """A SELECT of the fencing floor: the largest token ever purged."""
        return f"SELECT MAX({self.qn('value')}) FROM {self.floor_table}"  # noqa: S608

    def update(self, row: LockRow, attnames: Sequence[str]) -> None:
        """Write ``row``'s values of ``attnames`` to it."""
        connection = self.connection
        assignments = ", ".join(f"{self.column_sql[name]} = %s" for name in attnames)
        sql = f"UPDATE {self.table} SET {assignments} WHERE {self.pk_column} = %s"  # noqa: S608
        values = [
            self.fields[name].get_db_prep_save(getattr(row, name), connection) for name in attnames
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, [*values, row.pk])

    def _released_values(self, row: LockRow) -> list[Any]:
        """A released ``row``'s owner and expiry, as parameters of a hand-written
        ``UPDATE`` (a vendor's ``mark_released`` that also wakes the head)."""
        return [
            self.fields[name].get_db_prep_save(getattr(row, name), self.connection)
            for name in ("owner", "expires_at")
        ]

    # -- rows --------------------------------------------------------------------------

    def _row(self, values: Sequence[Any]) -> LockRow:
        """A ``LockRow`` of the model's columns followed by the database's now,
        converted as Django converts them, each value named by its column."""
        return row_of(self.attnames, self._convert(values))

    def _convert(self, row: Sequence[Any]) -> list[Any]:
        connection = self.connection
        values = list(row)
        for index, (converters, expression) in self._converters.items():
            if index < len(values):
                for converter in converters:
                    values[index] = converter(values[index], expression, connection)
        return values


def row_of(attnames: Sequence[str], values: Sequence[Any], *, shared: bool = False) -> LockRow:
    """A ``LockRow`` of ``values``: the columns of ``attnames``, then the database's now."""
    named = dict(zip(attnames, values, strict=False))
    return LockRow(
        pk=named["id"],
        resource=named["resource"],
        owner=named["owner"],
        acquired_at=named["acquired_at"],
        expires_at=named["expires_at"],
        fencing_token=named["fencing_token"],
        hold_count=named["hold_count"],
        label=named["label"],
        limit=named["limit"],
        now=values[len(attnames)],
        shared=shared,
    )
