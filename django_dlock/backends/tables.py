"""The tables of one database alias, as the lock backend's statements name them.

Every part of a ``LockBackend`` (its lock rows, holds, queue, purge and
renewals) writes its SQL with these names, quoted once per alias, and reads its
rows back through the conversions here: the columns of the model's fields,
followed by the database's now, each value named by its column.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model, QuerySet

from django_dlock.backends.results import LOCK_FIELDS, LockRow
from django_dlock.django_private import Converters, compile_expression, compile_select
from django_dlock.rules.clock import DatabaseNow, now_plus
from django_dlock.rules.predicates import SqlRow

#: The value a compiled SELECT is written with where a resource's name goes.
PLACEHOLDER = "django-dlock:placeholder"


class LockTables:
    """The models, quoted names and row conversions of one alias's tables: the
    locks (``distributed_locks``), their shared holds, the waiters and the
    fencing floor."""

    def __init__(self, using: str) -> None:
        self.using = using
        # Looked up by name: the models module imports the manager, which imports the backends.
        self.model: type[Model] = apps.get_model("django_dlock", "DistributedLock")
        self.hold_model: type[Model] = apps.get_model("django_dlock", "LockHold")
        self.waiter_model: type[Model] = apps.get_model("django_dlock", "LockWaiter")
        self.floor_model: type[Model] = apps.get_model("django_dlock", "FencingFloor")
        qn = connections[using].ops.quote_name
        self.qn = qn

        fields = self.model._meta.concrete_fields
        #: The lock row's attnames, in the model's field order.
        self.attnames = [field.attname for field in fields]
        if set(self.attnames) != set(LOCK_FIELDS):  # LockRow and the model must agree
            raise AssertionError(f"LockRow does not match the model's fields: {self.attnames}")
        self.fields = {field.attname: field for field in fields}
        self.table = qn(self.model._meta.db_table)
        #: {attname: quoted column}, in the model's field order
        self.column_sql = {
            field.attname: qn(field.column) for field in fields if field.column is not None
        }
        self.columns = list(self.column_sql.values())
        self.pk_column = self.column_sql[self.model._meta.pk.attname]

        hold_fields = self.hold_model._meta.concrete_fields
        self.holds_table = qn(self.hold_model._meta.db_table)
        #: The hold row's attnames, in column order, and {attname: quoted column}.
        self.hold_attnames = [field.attname for field in hold_fields]
        self.hold_column_sql = {
            field.attname: qn(field.column) for field in hold_fields if field.column
        }
        self.hold_fields = {field.attname: field for field in hold_fields}

        self.waiters_table = qn(self.waiter_model._meta.db_table)
        self.floor_table = qn(self.floor_model._meta.db_table)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.using]

    @cached_property
    def sql_row(self) -> SqlRow:
        """The lock row as the rule's predicates read it in this alias's SQL
        (``rules.predicates``): its columns, the database's now, and the
        vendor's spelling of a timestamp plus a duration, as Django spells it."""
        connection = self.connection
        now, params = compile_expression(self.using, DatabaseNow())
        if params:  # the predicates format the now in, as SQL without parameters
            raise AssertionError(f"the database's now takes parameters on {self.using!r}")
        ops = connection.ops

        def plus(at: str, duration: str) -> str:
            if connection.features.has_native_duration_field:
                return f"({at} + {duration})"
            spelled = ops.format_for_duration_arithmetic(duration)
            return f"({ops.combine_duration_expression('+', [at, spelled])})"

        return SqlRow(columns=self.column_sql, now=now, plus=plus)

    # -- a lock row as read back ---------------------------------------------------

    def row_query(self) -> QuerySet[Any]:
        """The SELECT of a resource's row (its name ``PLACEHOLDER``) and the
        database's now."""
        queryset: QuerySet[Any] = (
            self.model._default_manager.using(self.using)
            .filter(resource=PLACEHOLDER)
            .annotate(db_now=DatabaseNow())
            .order_by()
        )
        return queryset

    def compiled(self, queryset: QuerySet[Any]) -> tuple[str, list[Any], Converters]:
        """The SQL, parameters and converters of a SELECT of ``row_query``'s columns."""
        sql, params, columns, converters = compile_select(queryset)
        if columns != len(self.attnames) + 1:
            raise AssertionError(f"unexpected SELECT for {self.using!r}: {sql}")
        # Converters are called with the caller's connection: a connection
        # belongs to one thread.
        return sql, params, converters

    @cached_property
    def converters(self) -> Converters:
        """{column index: (converters, expression)} of a row and the database's
        now, as Django converts them (SQLite's text to datetimes)."""
        return self.compiled(self.row_query())[2]

    def fetch_row(self, sql: str, params: Sequence[Any]) -> LockRow | None:
        """The lock row ``sql`` (the columns of ``row_query``) returns."""
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else self.row(row)

    def row(self, values: Sequence[Any], connection: BaseDatabaseWrapper | None = None) -> LockRow:
        """A ``LockRow`` of the model's columns followed by the database's now,
        converted as Django converts them, each value named by its column
        (``connection``: this alias's, where the caller has it at hand)."""
        converters = self.converters
        # PostgreSQL's driver answers Python values: no converters.
        if converters:
            values = self.convert(values, converters, connection)
        return self.named_row(values)

    def named_row(self, values: Sequence[Any]) -> LockRow:
        """A ``LockRow`` of the model's columns followed by the database's now,
        converted already, each value named by its column."""
        if not self._in_field_order:
            return row_of(self.attnames, values)
        # The model's fields in the order of LOCK_FIELDS (as the model
        # declares them): each value by its place, without naming them first.
        return LockRow(
            pk=values[0], resource=values[1], owner=values[2], acquired_at=values[3],
            expires_at=values[4], fencing_token=values[5], hold_count=values[6],
            label=values[7], limit=values[8], lock_delay=values[9], now=values[10],
        )  # fmt: skip

    @cached_property
    def _in_field_order(self) -> bool:
        return tuple(self.attnames) == LOCK_FIELDS

    def convert(
        self,
        values: Sequence[Any],
        converters: Converters,
        connection: BaseDatabaseWrapper | None = None,
    ) -> list[Any]:
        """``values`` of a SELECT, converted by its ``converters``."""
        if connection is None:
            connection = self.connection
        converted = list(values)
        for index, (functions, expression) in converters.items():
            if index < len(converted):
                for function in functions:
                    converted[index] = function(converted[index], expression, connection)
        return converted

    def from_now(self, seconds: float) -> tuple[str, list[Any]]:
        """SQL and parameters of the database's time plus ``seconds``."""
        return compile_expression(self.using, now_plus(timedelta(seconds=seconds)))


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
        lock_delay=named.get("lock_delay"),  # a shared hold has none
    )
