"""The statements of the shared holds (``distributed_lock_holds``): readers of a
read-write lock and a semaphore's permits. Every one of them runs in a lock
transaction that holds the resource's row (``distributed_locks``) locked: that
row is their header, so the holds of a resource change one transaction at a
time, and need no row locks of their own."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.models import Model, QuerySet

from django_dlock.backends.clock import DatabaseNow, now_plus
from django_dlock.backends.queue import NO_TICKET, WaiterQueue
from django_dlock.backends.results import LockRow
from django_dlock.backends.statements import row_of
from django_dlock.django_private import Converters, compile_expression, compile_select
from django_dlock.rules import EXCLUSIVE

_PLACEHOLDER = "django-dlock:placeholder"


class HoldStatements(WaiterQueue):
    """The SQL of one alias's shared holds (a ``LockBackend`` mixes it in); who
    is admitted depends on who queues (``WaiterQueue``)."""

    using: str

    @cached_property
    def hold_model(self) -> type[Model]:
        return apps.get_model("django_dlock", "LockHold")

    @cached_property
    def _hold_names(self) -> tuple[str, list[str], dict[str, str]]:
        """The table, the attnames in column order, and {attname: quoted column}."""
        qn = connections[self.using].ops.quote_name
        fields = self.hold_model._meta.concrete_fields
        columns = {field.attname: qn(field.column) for field in fields if field.column}
        return qn(self.hold_model._meta.db_table), [f.attname for f in fields], columns

    @cached_property
    def _hold_select(self) -> tuple[str, Converters]:
        """SELECT of a resource's valid holds (oldest first, with the database's
        now), and the converters of its columns."""
        queryset: QuerySet[Any] = (
            self.hold_model._default_manager.using(self.using)
            .filter(resource=_PLACEHOLDER, expires_at__gt=DatabaseNow())
            .annotate(db_now=DatabaseNow())
            .order_by("acquired_at", "id")
        )
        sql, params, columns, converters = compile_select(queryset)
        if params[:1] != [_PLACEHOLDER] or columns != len(self._hold_names[1]) + 1:
            raise AssertionError(f"unexpected SELECT for {self.using!r}: {sql}")
        return sql, converters

    @cached_property
    def _owner_hold_select(self) -> str:
        """SELECT of one owner's hold of a resource, valid or not."""
        queryset: QuerySet[Any] = (
            self.hold_model._default_manager.using(self.using)
            .filter(resource=_PLACEHOLDER)
            .filter(owner=_PLACEHOLDER)  # (one filter() would sort its arguments)
            .annotate(db_now=DatabaseNow())
            .order_by()
        )
        sql, params, columns, _ = compile_select(queryset)
        if params[:2] != [_PLACEHOLDER] * 2 or columns != len(self._hold_names[1]) + 1:
            raise AssertionError(f"unexpected SELECT for {self.using!r}: {sql}")
        return sql

    def valid_holds(self, resource: str) -> list[LockRow]:
        """The holds of ``resource`` that are valid now, oldest first."""
        sql, converters = self._hold_select
        with connections[self.using].cursor() as cursor:
            cursor.execute(sql, [resource])
            return [self._hold_row(row, converters) for row in cursor.fetchall()]

    def _hold_row(self, values: Sequence[Any], converters: Converters) -> LockRow:
        connection = connections[self.using]
        converted = list(values)
        for index, (functions, expression) in converters.items():
            for function in functions:
                converted[index] = function(converted[index], expression, connection)
        return row_of(self._hold_names[1], converted, shared=True)

    def insert_hold(
        self,
        resource: str,
        owner: str,
        duration: timedelta,
        *,
        token: int,
        label: str,
        limit: int | None,
        hold_count: int = 1,
    ) -> LockRow:
        """A new hold of ``owner``; expired holds of ``resource`` (its own among
        them, which the unique key would refuse) are deleted first."""
        table, attnames, column = self._hold_names
        connection = connections[self.using]
        now_sql, now_params = compile_expression(self.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(self.using, now_plus(duration))
        with connection.cursor() as cursor:
            # Only quoted identifiers and Django-compiled SQL are formatted in.
            # The owner's hold that expired, and every other expired one: gone.
            cursor.execute(
                f"DELETE FROM {table} WHERE {column['resource']} = %s "  # noqa: S608
                f"AND ({column['owner']} = %s OR {column['expires_at']} <= {now_sql})",
                [resource, owner, *now_params],
            )
            names = (
                "resource", "owner", "label", "acquired_at", "expires_at", "hold_count",
                "fencing_token", "limit",
            )  # fmt: skip
            values = f"%s, %s, %s, {now_sql}, {expires_sql}, %s, %s, %s"
            cursor.execute(
                f"INSERT INTO {table} ({', '.join(column[name] for name in names)}) "  # noqa: S608
                f"VALUES ({values})",
                [resource, owner, label, *now_params, *expires_params, hold_count, token, limit],
            )
            # Read back as written, valid or not (a ttl of a millisecond may
            # have passed already).
            cursor.execute(self._owner_hold_select, [resource, owner])
            return self._hold_row(cursor.fetchone(), self._hold_select[1])

    def update_hold(self, hold: LockRow, attnames: Sequence[str]) -> None:
        table, _, column = self._hold_names
        fields = {field.attname: field for field in self.hold_model._meta.concrete_fields}
        connection = connections[self.using]
        values = [
            fields[name].get_db_prep_save(getattr(hold, name), connection) for name in attnames
        ]
        assignments = ", ".join(f"{column[name]} = %s" for name in attnames)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {assignments} WHERE {column['id']} = %s",  # noqa: S608
                [*values, hold.pk],
            )

    def delete_holds(self, resource: str, owner: str | None = None) -> None:
        """Delete the holds of ``resource`` (of ``owner`` only, when given)."""
        table, _, column = self._hold_names
        sql = f"DELETE FROM {table} WHERE {column['resource']} = %s"  # noqa: S608
        params: list[Any] = [resource]
        if owner is not None:
            sql += f" AND {column['owner']} = %s"
            params.append(owner)
        with connections[self.using].cursor() as cursor:
            cursor.execute(sql, params)

    def queued_before(self, resource: str, ticket: int | None) -> tuple[int, int]:
        """How many live waiters of ``resource`` queued before ``ticket`` (all,
        without one), and how many of them want it exclusively."""
        qn = connections[self.using].ops.quote_name
        sql = (
            f"SELECT COUNT(*), COALESCE(SUM(CASE WHEN {qn('mode')} = %s THEN 1 ELSE 0 END), 0) "  # noqa: S608
            f"FROM {self.waiters_table} WHERE {qn('resource')} = %s AND {qn('id')} < %s "
            f"AND {self.live_waiter_sql()}"
        )
        with connections[self.using].cursor() as cursor:
            cursor.execute(sql, [EXCLUSIVE, resource, ticket or NO_TICKET])
            everyone, exclusive = cursor.fetchone()
        return int(everyone), int(exclusive)
