"""Database plumbing shared by the lock operations: the database clock and the
transaction every operation runs in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.functions import Now
from django.db.models.sql import Query
from django.db.models.sql.compiler import SQLCompiler

from django_dlock.exceptions import LockTransactionError


class DatabaseNow(Now):
    """``Now()`` whose SQLite text compares correctly with stored datetimes.

    SQLite keeps datetimes as text and Django writes them with six fractional
    digits, while ``STRFTIME('%f')`` gives three: "12:00:00.500" sorts before
    "12:00:00.500000", so a lock released at that instant would still look
    valid for the rest of the millisecond. Padding to six digits fixes the order.
    """

    def as_sqlite(
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra_context: Any
    ) -> tuple[str, list[Any]]:
        return self.as_sql(
            compiler,
            connection,
            template="STRFTIME('%%%%Y-%%%%m-%%%%d %%%%H:%%%%M:%%%%f000', 'NOW')",
            **extra_context,
        )


def refuse_callers_transaction(using: str) -> None:
    """Raise ``LockTransactionError`` if the caller has a transaction open on ``using``.

    A lock written inside the caller's ``atomic()`` would stay invisible to
    other processes until that transaction commits, and vanish if it rolled
    back. Django's TestCase transaction is allowed, as it is for
    ``atomic(durable=True)``, and so is a lock transaction of django-dlock's own.
    """
    connection = connections[using]
    blocks = connection.atomic_blocks
    # Outside atomic() with autocommit turned off (set_autocommit(False)), the
    # caller's transaction is open too, and atomic() would not commit on exit.
    # (Read as an attribute: get_autocommit() would connect, which async code
    # must not do; a connection not yet open has no transaction.)
    autocommit_off = connection.connection is not None and not connection.autocommit
    if (
        blocks
        and not (getattr(blocks[-1], "_from_testcase", False) or getattr(blocks[-1], _OURS, False))
    ) or (not blocks and autocommit_off):
        raise LockTransactionError(
            f"A lock operation was called inside a transaction on database {using!r}. "
            "A lock written there would stay invisible to other processes until that "
            "transaction commits, and would vanish if it rolled back. Call it outside "
            "atomic() (and ATOMIC_REQUESTS), or set DLOCK_DATABASE to a database alias "
            "of its own (a second entry in DATABASES for the same database)."
        )


# Marks an atomic block that lock_transaction() opened.
_OURS = "_django_dlock_transaction"


@contextmanager
def lock_transaction(using: str) -> Iterator[None]:
    """One transaction of its own for a lock operation, committed on exit.

    Raises ``LockTransactionError`` when the caller has a transaction open on
    ``using`` (see ``refuse_callers_transaction``). Inside another
    ``lock_transaction`` it joins that one, so that several lock operations
    can commit together (``lock()`` takes the lock and leaves its waiter queue
    in one commit).

    On SQLite the transaction starts with ``BEGIN IMMEDIATE`` whatever the
    database's ``transaction_mode``: a deferred transaction that reads and then
    writes fails at once with "database is locked" when another process got the
    write lock first, while ``IMMEDIATE`` waits for it (the busy timeout).
    """
    refuse_callers_transaction(using)
    connection = connections[using]
    blocks = connection.atomic_blocks
    joining = bool(blocks) and getattr(blocks[-1], _OURS, False)
    # Joining: no savepoint, the round trips are not worth it (an error ends the
    # whole lock operation anyway). Otherwise durable: a savepoint only inside
    # Django's TestCase transaction, the one place where it nests.
    atomic = transaction.atomic(using=using, savepoint=not joining, durable=not joining)
    setattr(atomic, _OURS, True)
    if joining:
        with atomic:
            yield
        return
    callbacks: list[Callable[[], None]] = []
    setattr(atomic, _AFTER_COMMIT, callbacks)
    with _begin_immediate_on_sqlite(connection), atomic:
        yield
    for callback in callbacks:
        callback()


# The callbacks that after_commit() keeps for the outermost lock_transaction.
_AFTER_COMMIT = "_django_dlock_after_commit"


def after_commit(using: str, callback: Callable[[], None]) -> None:
    """Call ``callback`` once the lock transaction on ``using`` has committed:
    now, or, inside a lock_transaction that another one joined, after the
    outermost commits. (Unlike ``transaction.on_commit`` this also works inside
    Django's TestCase transaction, which never commits.)"""
    for block in connections[using].atomic_blocks:
        callbacks = getattr(block, _AFTER_COMMIT, None)
        if callbacks is not None:
            callbacks.append(callback)
            return
    callback()


def compile_expression(using: str, expression: Any) -> tuple[str, list[Any]]:
    """SQL and parameters of ``expression`` as Django writes it for ``using``."""
    query = Query(None)
    compiler = query.get_compiler(using=using)
    sql, params = compiler.compile(expression.resolve_expression(query))
    return sql, list(params)


def database_now(using: str) -> datetime:
    """The database's clock: one ``SELECT`` of ``DatabaseNow()``, as an aware datetime."""
    connection = connections[using]
    expression = DatabaseNow()
    sql, params = compile_expression(using, expression)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        (value,) = cursor.fetchone()
    # SQLite answers with text: the backend's converters make it a datetime.
    for converter in connection.ops.get_db_converters(expression):
        value = converter(value, expression, connection)
    return value  # type: ignore[no-any-return]


@contextmanager
def _begin_immediate_on_sqlite(connection: BaseDatabaseWrapper) -> Iterator[None]:
    """Make the SQLite backend start its next transaction with ``BEGIN IMMEDIATE``."""
    if connection.vendor != "sqlite":
        yield
        return
    connection.ensure_connection()  # the backend reads transaction_mode on connecting
    configured_mode = connection.transaction_mode  # type: ignore[attr-defined]
    if configured_mode != "EXCLUSIVE":
        connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
    try:
        yield
    finally:
        connection.transaction_mode = configured_mode  # type: ignore[attr-defined]
