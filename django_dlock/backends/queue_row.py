"""What a waiter sees in one look at its queue and the lock (``WaiterQueue.queue_state``),
with the times as each driver returns them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class QueueRow:
    """What a waiter sees in one look (``queue_state``)."""

    owner: str | None  # the lock row's owner: None without a row, "" once released
    expires_at: datetime | None  # the lock row's expiry, None without a row
    lock_delay: timedelta | None  # the row's lock-delay (``LockRow.lock_delay``)
    now: datetime  # the database's time of the look
    ahead: int  # live waiters queued before the ticket
    ahead_exclusive: int = 0  # of those, the ones that want the lock exclusively
    limit: int | None = None  # the semaphore's limit, while its permits hold the lock
    holders: int = 0  # valid shared holds (readers or permits)
    head: int | None = None  # the ticket of the first live waiter ahead
    queued: bool = True  # the ticket looked from is still in the queue
    # The monotonic time before the statement that read ``now`` was sent, where
    # the look knows it (``locking.told`` counts a told grant's lease from it).
    sent: float | None = None

    @classmethod
    def of(
        cls,
        owner: str | None,
        expires_at: Any,
        lock_delay: Any,
        now: Any,
        ahead: int,
        ahead_exclusive: int | None = 0,
        limit: int | None = None,
        holders: int = 0,
        head: int | None = None,
        queued: Any = True,
    ) -> QueueRow:
        """From a row's values, the times as the driver returned them."""
        return cls(
            owner=owner,
            expires_at=None if expires_at is None else to_datetime(expires_at),
            lock_delay=to_timedelta(lock_delay),
            now=to_datetime(now),
            ahead=int(ahead),
            ahead_exclusive=int(ahead_exclusive or 0),
            limit=limit,
            holders=int(holders),
            head=None if head is None else int(head),
            queued=bool(queued),
        )


def to_timedelta(value: Any) -> timedelta | None:
    """A duration as the backend returned it (SQLite, MariaDB: microseconds)."""
    if value is None or isinstance(value, timedelta):
        return value
    return timedelta(microseconds=int(value))


def to_datetime(value: Any) -> datetime:
    """A timestamp as the backend returned it (SQLite: text) as an aware datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)
