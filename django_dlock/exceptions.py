from __future__ import annotations


class DlockError(Exception):
    """Base class of every django-dlock error; never raised itself."""


class LockNotAcquired(DlockError):
    """The lock could not be acquired (held by another owner, or the wait timed out)."""


class LockNotOwned(DlockError):
    """The caller acted on a lock that another owner holds."""


class LockExpired(DlockError):
    """The caller acted on a lock that expired (and may have been taken over)."""


class LockTransactionError(DlockError, RuntimeError):
    """A lock operation was called inside a transaction the caller has open.

    A lock written inside the caller's ``atomic()`` would stay invisible to
    other processes until that transaction commits, and vanish if it rolls back.
    """


class LockKindMismatch(DlockError):
    """An acquisition asked for another kind of lock than the resource is while
    it has holders: a semaphore's limit where it is a lock (exclusive or
    shared), a lock where it is a semaphore, or another limit."""


class LockHeldByCaller(LockNotAcquired):
    """A ``lock()`` that is not reentrant was entered on a resource that the
    same thread (or asyncio task) holds already: it would wait for itself."""
