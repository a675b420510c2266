from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

if TYPE_CHECKING:
    from django_dlock.throttles.rate import Rate


class DlockError(Exception):
    """Base class of every django-dlock error; never raised itself."""


class LockNotAcquired(DlockError):
    """The lock could not be acquired (held by another owner, or the wait timed
    out). ``free_in``: seconds until it may come free (the holder's expiry, or
    a lock-delay's end) as the refusal or the wait's last look found it; None
    where nobody held it (a retry's countdown reads it)."""

    def __init__(self, *args: object, free_in: float | None = None) -> None:
        super().__init__(*args)
        self.free_in = free_in


class LockDeadlock(LockNotAcquired):
    """Waiting for the lock would never end: the waiter holds a lock that
    another waiter waits for, which holds (through a chain of such waiters) the
    one this waiter waits for. Raised in the waiter that joined the cycle last;
    it leaves the queue, and its locks are released as its blocks unwind."""


class LockLost(DlockError):
    """The caller acted on a lock it no longer holds: the parent of
    ``LockNotOwned`` and ``LockExpired``, for code that handles either alike.
    Never raised itself."""


class LockNotOwned(LockLost):
    """The caller acted on a lock that another owner holds."""


class LockExpired(LockLost):
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


class Throttled(DlockError):
    """A throttle refused a use of ``key``: ``rate`` allows no more uses now.

    ``retry_after`` is how long, on the database's clock, until the oldest use
    in the window leaves it and a use would be granted (if nobody takes that
    slot first): more than zero, at most the rate's period.
    """

    def __init__(self, key: str, rate: Rate, retry_after: timedelta) -> None:
        self.key = key
        self.rate = rate
        self.retry_after = retry_after
        # Imported here: ``import django_dlock`` (this module) stays safe in a
        # settings file, before the database layer can be imported.
        from django_dlock.humanize import duration_in_words

        # In the admin's words ("in 59 min"). Less than a second reads as one:
        # rounded down it would say "in 0 s" of a use that is still refused.
        wait = duration_in_words(max(retry_after.total_seconds(), 1))
        super().__init__(
            f"{key!r} was used {rate.limit} time(s) within the last {rate.period_text}, "
            f"as many as the rate {rate} allows; the next use is allowed in {wait}."
        )

    def __reduce__(self) -> tuple[type[Throttled], tuple[str, Rate, timedelta]]:
        # Pickled with its fields, not its message: a task queue (Celery's
        # retry, a result backend) carries it between processes.
        return (type(self), (self.key, self.rate, self.retry_after))


# Not a DlockError: code that catches DlockError around a lock operation (to
# treat it as "not acquired", say) must not start hiding its own bad arguments.
class InvalidArgument(ValidationError, ValueError):
    """An argument of a lock operation has an invalid value (a resource, an
    owner, a label, a ttl, a limit, a timeout, a kind of lock).

    A ``django.core.exceptions.ValidationError``, as these have always been, so
    that forms, model validation and the HTTP API treat it as invalid input; and
    a ``ValueError``, Python's error for a bad argument value, so that code
    catching either catches every one of them.
    """

    def __str__(self) -> str:
        # ValidationError prints the repr of its list of messages (['A ttl must
        # ...']), made for a form's errors; this one is raised, logged and shown
        # in tracebacks, where its sentence is what a reader needs.
        return " ".join(self.messages)
