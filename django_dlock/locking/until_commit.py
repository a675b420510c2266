"""``lock(..., until="commit")``: a lock bound to the caller's transaction.

A lock released when its block ends, inside ``atomic()``, is released before
the block's writes are committed: the next holder reads the rows as they were
and overwrites them (django-pglocks#15: a lost update in production). Bound to
the transaction, the lock is held until that transaction ends: released right
after it commits (``transaction.on_commit``), and after it rolls back.

- The lock is taken and released on a connection of its own (a thread of this
  module's, as async code's lock operations run in one): written in the
  caller's transaction, it would be invisible to other processes until the
  commit, and gone with a rollback. It is renewed in the background until
  then, however long the rest of the transaction takes.
- Not on SQLite, whose transaction holds the database's only write lock: the
  lock could not be written beside it (and taken around the transaction,
  ``with lock(): with atomic():``, it is released after the commit anyway).
- Django has no hook for a rollback: it drops the transaction's (or the
  savepoint's) ``on_commit`` callbacks. A watcher thread sees the lock's
  callback gone from the connection's list without having run, and releases
  the lock then (within ``WATCH_EVERY``). Django empties that list after the
  commit or rollback has reached the database, never before: a release that
  the watcher sends as the callback runs comes after the commit too, and one
  of the two releases the lock (``CommitBinding.end`` runs once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from django_dlock.exceptions import InvalidArgument, LockTransactionError
from django_dlock.locking.handle import LockHandle
from django_dlock.locking.reentry import Entered
from django_dlock.rules import Hold
from django_dlock.threads import with_checked_connection

__all__ = ["COMMIT", "EXIT", "bind_to_transaction", "validate_until"]

_T = TypeVar("_T")

logger = logging.getLogger("django_dlock")

# The values of ``until``: the block's exit (the default), or the transaction's end.
EXIT = "exit"
COMMIT = "commit"

# How often (seconds) the watcher looks for a transaction that rolled back.
WATCH_EVERY = 0.05


def validate_until(until: object, *, several: bool, reentrant: bool, min_hold: bool) -> str:
    """``until`` if it is ``"exit"`` or ``"commit"``, and ``"commit"`` only for
    one resource, not reentrant, without ``min_hold``."""
    if until not in (EXIT, COMMIT):
        raise InvalidArgument(
            f"until must be {EXIT!r} (the default) or {COMMIT!r}, not {until!r}.", code="until"
        )
    if until == COMMIT and (several or reentrant or min_hold):
        raise InvalidArgument(
            "until='commit' holds one resource until the transaction ends: it takes no list "
            "of resources, no reentrant=True and no min_hold.",
            code="until",
        )
    return str(until)


def not_in_async_code() -> LockTransactionError:
    """The error of ``async with lock(..., until="commit")``."""
    return LockTransactionError(
        "lock(..., until='commit') binds the lock to a transaction of atomic(), which "
        "is sync code: use it with `with`, or a decorator of a sync function."
    )


def bind_to_transaction(
    using: str,
    *,
    acquire: Callable[[], tuple[Hold, float]],
    hold: Callable[[Hold, float], Entered],
    end: Callable[[Entered], None],
) -> LockHandle:
    """Take a lock (``lock(..., until="commit")``) for the transaction open on
    ``using``: ``acquire()`` it on a connection of its own, ``hold()`` it (the
    holder's entry, renewed), and ``end()`` that entry (release it) on such a
    connection once the transaction ended. Its handle."""
    connection = connections[using]
    if connection.vendor == "sqlite":
        # Its transaction holds the database's one write lock from BEGIN
        # IMMEDIATE: no other connection could write the lock row meanwhile.
        raise LockTransactionError(
            "lock(..., until='commit') cannot work on SQLite: a transaction there holds the "
            "database's only write lock from its start, so the lock could not be written "
            "beside it. Take the lock around the transaction instead (with lock(...): with "
            "transaction.atomic(): ...): it is released after the commit."
        )
    if not connection.in_atomic_block:
        raise LockTransactionError(
            f"lock(..., until='commit') holds the lock until the transaction open on database "
            f"{using!r} ends, and none is open: call it inside transaction.atomic()."
        )
    acquired, started = _in_own_connection(using, acquire)
    binding = CommitBinding(using, hold(acquired, started), end, connection)
    transaction.on_commit(binding.callback, using=using, robust=True)
    _watcher.add(binding)
    return binding.entered.handle


class CommitBinding:
    """One lock held until its transaction ends."""

    def __init__(
        self,
        using: str,
        entered: Entered,
        end: Callable[[Entered], None],
        connection: BaseDatabaseWrapper,
    ) -> None:
        self.using = using
        self.entered = entered
        self._end = end
        self.connection = connection  # the caller's, whose transaction it is bound to
        self.callback: Callable[[], None] = self.end  # one object, to find it in the list
        self._ended = False
        self._ending = threading.Lock()

    def rolled_back(self) -> bool:
        """Whether the transaction dropped the lock's callback unrun (a rollback
        of it, or of the savepoint the lock was taken in)."""
        pending = list(self.connection.run_on_commit)  # a copy: the caller's thread writes it
        return not any(entry[1] is self.callback for entry in pending)

    def end(self) -> None:
        """Release the lock (once, whoever calls first), on a connection of its
        own. A release the database fails (it restarted, the connection broke)
        is logged, not raised: the transaction has ended, there is nobody to
        raise to, and the watcher that may be calling must go on watching the
        other locks. The renewals stopped before it, so the lock expires within
        its ttl; the caller's thread no longer holds it either way."""
        with self._ending:
            if self._ended:
                return
            self._ended = True
        _watcher.remove(self)
        try:
            _in_own_connection(self.using, self._end, self.entered)
        except Exception as error:
            logger.warning(
                "Could not release the lock on %r after its transaction ended (%s): "
                "it expires within its ttl.",
                self.entered.handle.resource,
                error,
            )


class _Watcher:
    """The thread that releases the locks whose transactions rolled back; it
    runs only while some lock is bound to a transaction."""

    def __init__(self) -> None:
        self._bindings: set[CommitBinding] = set()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, binding: CommitBinding) -> None:
        with self._condition:
            self._bindings.add(binding)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="django-dlock until-commit watcher", daemon=True
                )
                self._thread.start()

    def remove(self, binding: CommitBinding) -> None:
        with self._condition:
            self._bindings.discard(binding)

    def _run(self) -> None:
        while True:
            with self._condition:
                if not self._bindings:
                    self._thread = None
                    return
                bindings = list(self._bindings)
            for binding in bindings:
                if binding.rolled_back():
                    binding.end()
            with self._condition:
                self._condition.wait(WATCH_EVERY)


_watcher = _Watcher()

# The threads whose connections take and release the locks bound to
# transactions (a wait for the lock keeps one busy, as its caller).
_executor: ThreadPoolExecutor | None = None
_executor_made = threading.Lock()


def _in_own_connection(using: str, function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` in a thread of this module's, on that thread's
    connection to ``using`` (checked before and after, as Django does around a
    request), outside the caller's transaction."""
    global _executor
    with _executor_made:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="django-dlock commit")
    return _executor.submit(with_checked_connection(using, function, *args)).result()
