"""The transaction every lock operation runs in, and the refusal to run inside
a transaction the caller has open."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import ParamSpec, Protocol, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.django_private import atomic_depth, innermost_atomic_is_testcase
from django_dlock.exceptions import LockTransactionError

_T = TypeVar("_T")
_P = ParamSpec("_P")


class TransactionHooks(Protocol):
    """What a backend says about its lock transactions (``LockBackend``)."""

    using: str

    def transaction(self) -> AbstractContextManager[None]: ...

    def retry_after(self, error: Exception, attempt: int, started: float) -> float | None: ...


def refuse_callers_transaction(using: str, connection: BaseDatabaseWrapper | None = None) -> None:
    """Raise ``LockTransactionError`` if the caller has a transaction open on
    ``using`` (whose connection the caller may pass, having it at hand).

    A lock written inside the caller's ``atomic()`` would stay invisible to
    other processes until that transaction commits, and vanish if it rolled
    back. Django's TestCase transaction is allowed, as it is for
    ``atomic(durable=True)``.
    """
    if connection is None:
        connection = connections[using]
    inside_atomic = connection.in_atomic_block  # (atomic_depth() > 0, without a call)
    # Outside atomic() with autocommit turned off (set_autocommit(False)), the
    # caller's transaction is open too, and atomic() would not commit on exit.
    # (Read as an attribute: get_autocommit() would connect, which async code
    # must not do; a connection not yet open has no transaction.)
    autocommit_off = connection.connection is not None and not connection.autocommit
    inside_callers = inside_atomic and not innermost_atomic_is_testcase(connection)
    if inside_callers or (not inside_atomic and autocommit_off):
        raise LockTransactionError(
            f"A lock operation was called inside a transaction on database {using!r}. "
            "A lock written there would stay invisible to other processes until that "
            "transaction commits, and would vanish if it rolled back. Call it outside "
            "atomic() (and ATOMIC_REQUESTS), or set DLOCK_DATABASE to a database alias "
            "of its own (a second entry in DATABASES for the same database)."
        )


def in_lock_transaction(backend: TransactionHooks, operation: Callable[[], _T]) -> _T:
    """``operation()`` in a lock transaction of its own, committed on exit, run
    again when the backend says the failure was a lost race that wrote nothing
    (``LockBackend.retry_after``).

    Raises ``LockTransactionError`` when the caller has a transaction open on
    the backend's database (see ``refuse_callers_transaction``). Durable: a
    savepoint only inside Django's TestCase transaction, the one place where it
    nests. The backend may change how the transaction begins (SQLite starts it
    with ``BEGIN IMMEDIATE``: see ``SQLiteBackend.transaction``).

    InnoDB breaks a deadlock by rolling one transaction back (error 1213), and
    its row and index locks make some unavoidable: a first insert locks the
    index entry after its key, which a neighbour's first insert may hold.
    SQLite's lock transaction does not wait in SQLite's busy handler, which
    sleeps whole milliseconds, but here, in steps a lock hand-over can afford.
    Either way a lost race is never an exception. (Inside Django's TestCase
    transaction a rollback would undo the test's own work too, so there it
    raises.)
    """
    using = backend.using
    connection = connections[using]

    def attempt() -> _T:
        refuse_callers_transaction(using, connection)
        with backend.transaction(), transaction.atomic(using=using, durable=True):
            return operation()

    if atomic_depth(connection) > 0:
        return attempt()  # the test's transaction: a retry would not undo the attempt
    return run_again_after_lost_races(backend, attempt)


def run_again_after_lost_races(
    backend: TransactionHooks, operation: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """``operation(*args, **kwargs)``, run again while ``backend.retry_after``
    says that its failure was a lost race that wrote nothing (an InnoDB
    deadlock's victim, SQLite's busy database), after the pause it gives.
    (The arguments passed on, not bound in a lambda: a call less per operation.)"""
    started = time.monotonic()
    for attempt in itertools.count(1):
        try:
            return operation(*args, **kwargs)
        except DatabaseError as error:
            pause = backend.retry_after(error, attempt, started)
            if pause is None:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
