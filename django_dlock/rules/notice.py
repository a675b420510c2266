"""The wake-up that carries a grant: what a release tells the head of the queue
it handed the lock to, so that the head starts its work on the notification
alone, with no round trip of its own (issue 46).

A wake-up's payload is the head's ticket in decimal; a release that made the
head the holder appends the grant as the database wrote it:
``"ticket pk fencing_token acquired_us expires_us"`` (the two times in
microseconds since the epoch, by the database's clock). The lease is
``expires - acquired``: the short offer lease (``OFFER_LEASE``, or the
head's ttl where shorter), so a head that is not there to read it (paused,
dead) holds the others up for that long only. The PostgreSQL release writes it
in its ``NOTIFY`` (``backends/postgresql/handover.py``), SQLite's in its
datagram (``backends/sqlite/base.py``); the listeners read it
(``listeners/base.py``), and the waiter takes it (``locking/waiting.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class GrantNotice:
    """A grant told in a wake-up: the lock row's primary key, the grant's
    fencing token, and its start and expiry by the database's clock."""

    pk: int
    fencing_token: int
    acquired_at: datetime
    expires_at: datetime

    @property
    def lease(self) -> float:
        """Seconds the grant lasts from the database's now when it was written."""
        return (self.expires_at - self.acquired_at).total_seconds()

    def payload(self, ticket: int) -> str:
        return (
            f"{ticket} {self.pk} {self.fencing_token} "
            f"{_microseconds(self.acquired_at)} {_microseconds(self.expires_at)}"
        )


def read_payload(payload: str) -> tuple[int, GrantNotice | None]:
    """The ticket a wake-up names, and the grant it carries (None without one).
    Raises ``ValueError`` on a payload that is neither."""
    parts = payload.split()
    ticket = int(parts[0])
    if len(parts) != 5:
        return ticket, None
    pk, token, acquired, expires = (int(part) for part in parts[1:])
    return ticket, GrantNotice(pk, token, _from_microseconds(acquired), _from_microseconds(expires))


def _microseconds(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _from_microseconds(microseconds: int) -> datetime:
    return _EPOCH + timedelta(microseconds=microseconds)
