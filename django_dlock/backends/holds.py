"""The statements of the shared holds (``distributed_lock_holds``): readers of a
read-write lock and a semaphore's permits. Every one of them runs in a lock
transaction that holds the resource's row (``distributed_locks``) locked: that
row is their header, so the holds of a resource change one transaction at a
time, and need no row locks of their own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.db.models import QuerySet

from django_dlock.backends.results import LockRow
from django_dlock.backends.tables import PLACEHOLDER, LockTables, row_of
from django_dlock.django_private import Converters, compile_expression, compile_select
from django_dlock.rules.clock import DatabaseNow, now_plus


class Holds:
    """The statements of one alias's shared holds."""

    def __init__(self, tables: LockTables) -> None:
        self.tables = tables

    @cached_property
    def valid_select(self) -> tuple[str, Converters]:
        """SELECT of a resource's holds (oldest first, with the database's now),
        and the converters of its columns. (Which are valid is decided on the
        caller's now: ``valid_holds``.)"""
        tables = self.tables
        queryset: QuerySet[Any] = (
            tables.hold_model._default_manager.using(tables.using)
            .filter(resource=PLACEHOLDER)
            .annotate(db_now=DatabaseNow())
            .order_by("acquired_at", "id")
        )
        sql, params, columns, converters = compile_select(queryset)
        if params[:1] != [PLACEHOLDER] or columns != len(tables.hold_attnames) + 1:
            raise AssertionError(f"unexpected SELECT for {tables.using!r}: {sql}")
        return sql, converters

    @cached_property
    def owner_select(self) -> str:
        """SELECT of one owner's hold of a resource, valid or not."""
        tables = self.tables
        queryset: QuerySet[Any] = (
            tables.hold_model._default_manager.using(tables.using)
            .filter(resource=PLACEHOLDER)
            .filter(owner=PLACEHOLDER)  # (one filter() would sort its arguments)
            .annotate(db_now=DatabaseNow())
            .order_by()
        )
        sql, params, columns, _ = compile_select(queryset)
        if params[:2] != [PLACEHOLDER] * 2 or columns != len(tables.hold_attnames) + 1:
            raise AssertionError(f"unexpected SELECT for {tables.using!r}: {sql}")
        return sql

    def valid_holds(self, resource: str, now: datetime | None = None) -> list[LockRow]:
        """The holds of ``resource`` that are valid at ``now``, oldest first
        (each with that ``now``): the now of the decision that reads them, which
        is the header's, read by an earlier statement of the lock transaction.
        (A now of their own statement would be later: a hold that expired
        between the two would be missing from a decision that still counts it
        valid, and a writer admitted beside a valid reader.) Without ``now``,
        the database's now as this statement reads it."""
        sql, _ = self.valid_select
        with self.tables.connection.cursor() as cursor:
            cursor.execute(sql, [resource])
            holds = [self.row(row) for row in cursor.fetchall()]
        if now is not None:
            holds = [replace(hold, now=now) for hold in holds]
        return [hold for hold in holds if hold.held]

    def row(self, values: Sequence[Any]) -> LockRow:
        """A hold's ``LockRow`` of the hold's columns followed by the database's now."""
        tables = self.tables
        converted = tables.convert(values, self.valid_select[1])
        return row_of(tables.hold_attnames, converted, shared=True)

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
        tables = self.tables
        table, column = tables.holds_table, tables.hold_column_sql
        now_sql, now_params = compile_expression(tables.using, DatabaseNow())
        expires_sql, expires_params = compile_expression(tables.using, now_plus(duration))
        with tables.connection.cursor() as cursor:
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
            cursor.execute(self.owner_select, [resource, owner])
            return self.row(cursor.fetchone())

    def update_hold(self, hold: LockRow, attnames: Sequence[str]) -> None:
        tables = self.tables
        column, connection = tables.hold_column_sql, tables.connection
        values = [
            tables.hold_fields[name].get_db_prep_save(getattr(hold, name), connection)
            for name in attnames
        ]
        assignments = ", ".join(f"{column[name]} = %s" for name in attnames)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {tables.holds_table} SET {assignments} WHERE {column['id']} = %s",  # noqa: S608
                [*values, hold.pk],
            )

    def delete_holds(self, resource: str, owner: str | None = None) -> None:
        """Delete the holds of ``resource`` (of ``owner`` only, when given)."""
        tables = self.tables
        column = tables.hold_column_sql
        sql = f"DELETE FROM {tables.holds_table} WHERE {column['resource']} = %s"  # noqa: S608
        params: list[Any] = [resource]
        if owner is not None:
            sql += f" AND {column['owner']} = %s"
            params.append(owner)
        with tables.connection.cursor() as cursor:
            cursor.execute(sql, params)
