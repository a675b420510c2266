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
  of the two releases the lock (``CommitBinding.end`` runs once). The
  callback returns once the lock is released, by either: the caller's next
  transaction may take it again.
- The process's exit must not lose a release: the watcher is a daemon thread,
  which the exit does not wait for, and the pool of this module refuses new
  work once the interpreter's shutdown has begun. So the locks of transactions
  that rolled back are released at the exit (``_release_at_exit``), and a
  release the pool refuses runs in a thread of its own.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
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

# How long (seconds) the process's exit waits for a release under way in another thread.
EXIT_WAIT = 5.0


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
    acquire: Callable[[], tuple[Hold, float, float | None]],
    hold: Callable[[Hold, float, float | None], Entered],
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
    acquired, started, lease = _in_own_connection(using, acquire)
    binding = CommitBinding(using, hold(acquired, started, lease), end, connection)
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
        self.callback: Callable[[], None] = self.committed  # one object, to find it in the list
        self._ended = False
        self._ending = threading.Lock()
        self._released = threading.Event()  # set once the release is over, done or failed

    def rolled_back(self) -> bool:
        """Whether the transaction dropped the lock's callback unrun (a rollback
        of it, or of the savepoint the lock was taken in)."""
        pending = list(self.connection.run_on_commit)  # a copy: the caller's thread writes it
        return not any(entry[1] is self.callback for entry in pending)

    def committed(self) -> None:
        """The commit's callback: release the lock, and return once it is
        released. Django empties the list of callbacks before it runs them, so
        the watcher may have begun this release while an earlier one ran."""
        self.end()
        self._released.wait()

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
        try:
            _in_own_connection(self.using, self._end, self.entered)
        except Exception as error:
            logger.warning(
                "Could not release the lock on %r after its transaction ended (%s): "
                "it expires within its ttl.",
                self.entered.handle.resource,
                error,
            )
        finally:
            self._released.set()
            # Watched until now: an exit meanwhile waits for this release (``_release_at_exit``).
            _watcher.remove(self)

    def wait_if_ending(self, seconds: float) -> None:
        """Wait up to ``seconds`` for a release that another thread has begun."""
        if self._ended:
            self._released.wait(seconds)


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
            else:  # a look now, and the next wait on today's tick
                self._condition.notify_all()

    def remove(self, binding: CommitBinding) -> None:
        with self._condition:
            self._bindings.discard(binding)

    def bindings(self) -> list[CommitBinding]:
        """The locks bound to transactions, not yet released."""
        with self._condition:
            return list(self._bindings)

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


def released_if_rolled_back(entered: Entered) -> bool:
    """Release at once the lock of ``entered`` if it is bound to a transaction
    that rolled back (the watcher would, within ``WATCH_EVERY``), so that the
    thread may ask for it again (a retry after ``LockDeadlock``) instead of
    finding it still its own; whether it was."""
    for binding in _watcher.bindings():
        if binding.entered is entered and binding.rolled_back():
            binding.end()
            binding.wait_if_ending(EXIT_WAIT)
            return True
    return False


def _release_at_exit() -> None:
    """Release the locks whose transactions rolled back, and wait for the
    releases under way: the watcher, a daemon thread, may never look again.
    Run twice at the exit: before the thread pools stop taking work (and
    before the threads that are not daemons are joined), and once those
    threads ended, for the transactions they ended meanwhile."""
    for binding in _watcher.bindings():
        if binding.rolled_back():
            binding.end()
        binding.wait_if_ending(EXIT_WAIT)


# CPython's hook for the first run, where concurrent.futures registered the
# pools' stop as it was imported above (the last registered runs first);
# ``atexit`` runs after the threads that are not daemons were joined.
_before_threads_joined: Callable[[Callable[[], None]], object] = getattr(
    threading, "_register_atexit", atexit.register
)
_before_threads_joined(_release_at_exit)
atexit.register(_release_at_exit)

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
    call = with_checked_connection(using, function, *args)
    try:
        future = _executor.submit(call)
    except RuntimeError:  # the interpreter's shutdown has begun: the pool takes no more work
        future = _in_new_thread(using, call)
    return future.result()


def _in_new_thread(using: str, call: Callable[[], _T]) -> Future[_T]:
    """``call()`` in a thread started for it, whose connection to ``using`` is
    closed after it (nothing would close it, the thread gone)."""
    future: Future[_T] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as error:
            future.set_exception(error)
        finally:
            connections[using].close()

    threading.Thread(target=run, name="django-dlock commit (exit)", daemon=True).start()
    return future
