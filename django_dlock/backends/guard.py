"""``held.atomic()``: a transaction whose first statement proves the lock is
still the holder's and locks its row until the transaction ends.

Every acquisition, renewal, release and purge of a resource writes (or deletes)
its row, after locking it: ``SELECT ... FOR UPDATE``, an ``UPDATE``, SQLite's
write lock. A transaction that holds a shared lock on the row (PostgreSQL
``FOR SHARE``, MariaDB ``LOCK IN SHARE MODE``; SQLite: the database's write
lock, taken by ``BEGIN IMMEDIATE``) therefore keeps every other owner from
taking the lock over until it ends, and the purges skip the row (``SKIP
LOCKED``) or wait. What it writes commits before any later holder's take.

A paused holder must not keep the resource for ever: the block is given the
lease's time left plus ``GRACE`` seconds, after which the database ends it:

- PostgreSQL: ``idle_in_transaction_session_timeout``, set for the transaction
  alone (``set_config(..., true)``) by the first statement itself, so no pause
  between statements goes unbounded; the server ends the session.
- MariaDB: ``idle_transaction_timeout`` (whole seconds, so up to one more),
  set for the session before the transaction begins (``GRACE``) and after the
  check (the time left plus ``GRACE``), restored after the block; the server
  closes the connection.
- SQLite: no server can end a paused process's transaction. Its write lock is
  held meanwhile, so nobody else writes (other writers wait their busy timeout),
  and the check before the commit below rolls back a block that ended late.

On every database, a block that ends after its deadline (the time left plus
``GRACE``, on this process's monotonic clock, which runs on while a process is
stopped) is rolled back with ``LockExpired`` instead of committed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, transaction

from django_dlock.backends.tables import LockTables
from django_dlock.django_private import sqlite_begin_immediate
from django_dlock.exceptions import LockExpired
from django_dlock.rules.predicates import HELD_BY_OWNER, SqlRow

__all__ = ["GRACE", "Guard", "guard_for", "same_database"]

#: Seconds a guarded block may outlast the lease it began with before the
#: database ends it (PostgreSQL, MariaDB) or its commit is refused (every database).
GRACE = 1.0


class Guard:
    """The statements of ``held.atomic()`` on one alias (the portable part)."""

    #: The clause that locks the rows read, until the transaction ends.
    share_clause = "FOR SHARE"

    def __init__(self, tables: LockTables) -> None:
        self.tables = tables

    @property
    def using(self) -> str:
        return self.tables.using

    def seconds_left(self, expires_at: str, now: str) -> str:
        """SQL of the seconds from ``now`` to ``expires_at``."""
        raise NotImplementedError

    def extra_columns(self, left: str) -> str:
        """More columns of the check (PostgreSQL sets its timeout there)."""
        return ""

    @cached_property
    def check_sql(self) -> dict[bool, str]:
        """The check, {shared: SQL}; parameters: resource, fencing token, owner.
        It answers a row (the seconds the lease has left) only while the hold
        of that token is the owner's and valid (``HELD_BY_OWNER``), and locks
        the resource's row (and the shared hold's) until the transaction ends."""
        tables = self.tables
        rule = tables.sql_row
        header = rule.aliased("l.")
        statements = {}
        for shared in (False, True):
            if shared:
                hold = SqlRow(tables.hold_column_sql, rule.now, rule.plus, "h.")
                source = (
                    f"{tables.holds_table} h INNER JOIN {tables.table} l "
                    f"ON l.{tables.column_sql['resource']} = h.{tables.hold_column_sql['resource']}"
                )
                row = hold
            else:
                source, row = f"{tables.table} l", header
            mine = HELD_BY_OWNER.sql(replace(row, placeholders={"owner": "%s"}))
            left = self.seconds_left(f"{row.alias}{row.columns['expires_at']}", rule.now)
            statements[shared] = (
                f"SELECT {left}{self.extra_columns(left)} FROM {source} "  # noqa: S608
                f"WHERE {row.alias}{row.columns['resource']} = %s "
                f"AND {row.alias}{row.columns['fencing_token']} = %s AND {mine} {self.share_clause}"
            )
        return statements

    @contextmanager
    def session(self) -> Iterator[None]:
        """Around the transaction: a vendor's session settings, restored after."""
        yield

    @contextmanager
    def begin(self, using: str) -> Iterator[None]:
        """The transaction (SQLite begins it with its write lock)."""
        with transaction.atomic(using=using, durable=True):
            yield

    def bound(self, cursor: Any, left: float) -> None:
        """After the check: end the transaction ``left`` + ``GRACE`` seconds on."""

    @contextmanager
    def atomic(
        self, resource: str, owner: str, fencing_token: int, *, shared: bool, using: str
    ) -> Iterator[float]:
        """The guarded transaction on ``using`` (the lock's database); yields the
        seconds the lease had left. ``LockExpired`` when the hold is no longer
        the owner's (nothing written), or the block ended past its deadline
        (rolled back)."""
        with self.session(), self.begin(using):
            started = time.monotonic()
            with connections[using].cursor() as cursor:
                cursor.execute(self.check_sql[shared], [resource, fencing_token, owner])
                found = cursor.fetchone()
                if found is None:
                    raise LockExpired(
                        f"The lock on {resource!r} is no longer this owner's (it expired, "
                        "was released or taken over): nothing was written."
                    )
                left = float(found[0])
                self.bound(cursor, left)
            deadline = started + left + GRACE
            yield left
            if time.monotonic() >= deadline:
                raise LockExpired(
                    f"The block guarded by the lock on {resource!r} ended more than "
                    f"{GRACE:g} s after the lease it began with: rolled back."
                )


class PostgreSQLGuard(Guard):
    def seconds_left(self, expires_at: str, now: str) -> str:
        return f"EXTRACT(EPOCH FROM ({expires_at} - {now}))"

    def extra_columns(self, left: str) -> str:
        # In the check itself: no pause between two statements goes unbounded.
        ms = f"(CEIL(({left}) * 1000) + {int(GRACE * 1000)})::bigint::text"
        return f", set_config('idle_in_transaction_session_timeout', {ms}, true)"


class MySQLGuard(Guard):
    share_clause = "LOCK IN SHARE MODE"

    def seconds_left(self, expires_at: str, now: str) -> str:
        return f"(TIMESTAMPDIFF(MICROSECOND, {now}, {expires_at}) / 1000000)"

    @contextmanager
    def session(self) -> Iterator[None]:
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@SESSION.idle_transaction_timeout")
            (kept,) = cursor.fetchone()
            # Until the check says how long the lease has left: GRACE alone.
            cursor.execute(f"SET SESSION idle_transaction_timeout = {math.ceil(GRACE)}")
        try:
            yield
        finally:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(f"SET SESSION idle_transaction_timeout = {int(kept)}")
            except DatabaseError:
                pass  # the server closed the connection (a timeout): nothing to restore

    def bound(self, cursor: Any, left: float) -> None:
        cursor.execute(f"SET SESSION idle_transaction_timeout = {math.ceil(left + GRACE)}")


class SQLiteGuard(Guard):
    share_clause = ""  # the write lock, taken by BEGIN IMMEDIATE, excludes every writer

    def seconds_left(self, expires_at: str, now: str) -> str:
        return f"((JULIANDAY({expires_at}) - JULIANDAY({now})) * 86400.0)"

    @contextmanager
    def begin(self, using: str) -> Iterator[None]:
        connection = connections[using]
        connection.ensure_connection()  # the backend reads transaction_mode on connecting
        with sqlite_begin_immediate(connection), transaction.atomic(using=using, durable=True):
            yield


_GUARDS: dict[str, type[Guard]] = {
    "postgresql": PostgreSQLGuard,
    "mysql": MySQLGuard,
    "sqlite": SQLiteGuard,
}


def guard_for(tables: LockTables, vendor: str) -> Guard:
    """The guard of ``tables``' alias, whose database is ``vendor``'s."""
    return _GUARDS[vendor](tables)


def same_database(one: str, other: str) -> bool:
    """Whether the aliases ``one`` and ``other`` name the same database (a
    second alias for the lock operations' own connection, say)."""
    if one == other:
        return True
    if other not in settings.DATABASES:
        return False
    keys = ("ENGINE", "NAME", "HOST", "PORT")
    first, second = connections[one].settings_dict, connections[other].settings_dict
    return all(first.get(key) == second.get(key) for key in keys)
