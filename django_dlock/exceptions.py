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
