"""The transaction every lock operation runs in, and the refusal to run inside
a transaction the caller has open."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connections, transaction

from django_dlock.backends import backend_for
from django_dlock.exceptions import LockTransactionError


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
        blocks and not (_is_testcase_transaction(blocks[-1]) or getattr(blocks[-1], _OURS, False))
    ) or (not blocks and autocommit_off):
        raise LockTransactionError(
            f"A lock operation was called inside a transaction on database {using!r}. "
            "A lock written there would stay invisible to other processes until that "
            "transaction commits, and would vanish if it rolled back. Call it outside "
            "atomic() (and ATOMIC_REQUESTS), or set DLOCK_DATABASE to a database alias "
            "of its own (a second entry in DATABASES for the same database)."
        )


def _is_testcase_transaction(block: object) -> bool:
    """Whether ``block`` is the transaction Django's ``TestCase`` wraps each test in.

    Django has no public way to tell; ``Atomic._from_testcase`` is what its own
    ``atomic(durable=True)`` checks for the same reason, so this is the one place
    django-dlock reads it.
    """
    return bool(getattr(block, "_from_testcase", False))


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

    The backend may change how the transaction begins (SQLite starts it with
    ``BEGIN IMMEDIATE``: see ``SQLiteBackend.transaction``).
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
    callbacks: list[Callable[[], object]] = []
    setattr(atomic, _AFTER_COMMIT, callbacks)
    with backend_for(using).transaction(), atomic:
        yield
    for callback in callbacks:
        callback()


# The callbacks that after_commit() keeps for the outermost lock_transaction.
_AFTER_COMMIT = "_django_dlock_after_commit"


def after_commit(using: str, callback: Callable[[], object]) -> None:
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
