"""A throttle's rule, once: when a use is granted, and what it keeps.

A key keeps the times of its last uses in one text column, ``ring``: each a
whole number of microseconds since 1970 (the database's clock), written in
``WIDTH`` digits, oldest first, at most ``limit`` of them. Uses of a key are
decided one at a time (each statement holds the key's row while it decides),
after one another, so the times are in order and the last use's is the
largest.

A use at ``now`` under ``limit`` per ``period`` is **granted** when fewer than
``limit`` uses are kept, or when the ``limit``-th newest of them left the
window (it is at or before ``now - period``): then fewer than ``limit`` uses
lie within the last period, and that is exact, whatever the count. A granted
use keeps the ``limit - 1`` newest times (less those that left the window) and
appends its own. A refused use
keeps them all: it waits until the ``limit``-th newest leaves the window.

The same rule is written here twice, in one place: as SQL (``granted_sql``,
``kept_sql``), rendered with a vendor's spelling of a few string and integer
functions (a ``ThrottleDialect``, which each backend gives), and in Python
(``granted``, ``kept``), which tests compare with the database's answers.
The rest (``uses_in_window``, ``limit_th_newest``) reads what a use answered.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = [
    "EPOCH",
    "WIDTH",
    "ThrottleDialect",
    "granted",
    "granted_sql",
    "kept",
    "kept_sql",
    "limit_th_newest",
    "microseconds",
    "moment",
    "uses_in_window",
]

#: Digits of one kept time: microseconds since 1970 stay below 10**16 until 2286.
WIDTH = 16
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A granted use also drops the oldest times that left the window: all of them
# when the newest did, else the first 4, 2 or 1 when that many did (a time
# that left the window never counts again: the clock goes on). So a key used
# below its rate keeps about the uses in its window, not the last N - 1,
# without a search in SQL: the ring shrinks by up to 3 a use.
_DROPS = (4, 2, 1)
# Read where the ring has no time: later than any now.
_SENTINEL = 10**WIDTH - 1


class ThrottleDialect(Protocol):
    """A vendor's spelling of what the rule's SQL needs (each argument is SQL)."""

    def count(self, ring: str) -> str:
        """How many times ``ring`` keeps: its length divided by ``WIDTH``, an integer."""
        ...

    def entry(self, ring: str, index: str) -> str:
        """The ``index``-th time kept (from 0, the oldest), as an integer."""
        ...

    def tail(self, ring: str, index: str) -> str:
        """``ring`` from its ``index``-th time on."""
        ...

    def append(self, ring: str, now_us: str) -> str:
        """``ring`` followed by ``now_us`` written in ``WIDTH`` digits."""
        ...

    def greatest(self, first: str, second: str) -> str:
        """The larger of two integers."""
        ...

    def least(self, first: str, second: str) -> str:
        """The smaller of two integers."""
        ...


# -- in SQL ------------------------------------------------------------------------


def granted_sql(d: ThrottleDialect, ring: str, now_us: str, limit: int, period_us: int) -> str:
    """1 when a use at ``now_us`` is granted on the kept ``ring``, else 0.
    (``limit`` and ``period_us`` are integers: formatted in, never text.)"""
    limit, period_us = int(limit), int(period_us)
    count = d.count(ring)
    oldest = d.entry(ring, f"({count} - {limit})")
    # CASE, not OR: the entry is read only where there is one.
    return (
        f"(CASE WHEN {count} < {limit} THEN 1 "
        f"WHEN {oldest} <= {now_us} - {period_us} THEN 1 ELSE 0 END)"
    )


def kept_sql(d: ThrottleDialect, ring: str, now_us: str, limit: int, period_us: int) -> str:
    """The ``ring`` a use granted at ``now_us`` leaves: at most the ``limit - 1``
    newest times, less those that left the window (``_DROPS``), then its own."""
    count = d.count(ring)
    cutoff = f"{now_us} - {int(period_us)}"
    # Past the last time kept, the entry read is the sentinel, which never left.
    padded = d.append(ring, str(_SENTINEL))
    checks = [f"WHEN {d.entry(padded, d.greatest(f'{count} - 1', '0'))} <= {cutoff} THEN {count}"]
    for dropped in _DROPS:
        index = d.least(str(dropped - 1), count)
        checks.append(f"WHEN {d.entry(padded, index)} <= {cutoff} THEN {dropped}")
    drop = f"(CASE {' '.join(checks)} ELSE 0 END)"
    return d.append(d.tail(ring, d.greatest(f"{count} - {int(limit) - 1}", drop)), now_us)


# -- in Python ---------------------------------------------------------------------


def _count(ring: str) -> int:
    return len(ring) // WIDTH


def _entry(ring: str, index: int) -> int:
    return int(ring[index * WIDTH : (index + 1) * WIDTH])


def granted(ring: str, now_us: int, limit: int, period_us: int) -> bool:
    """``granted_sql`` in Python."""
    count = _count(ring)
    return count < limit or _entry(ring, count - limit) <= now_us - period_us


def kept(ring: str, now_us: int, limit: int, period_us: int) -> str:
    """``kept_sql`` in Python."""
    count, cutoff = _count(ring), now_us - period_us
    padded = ring + str(_SENTINEL)
    drop = 0
    if _entry(padded, max(count - 1, 0)) <= cutoff:
        drop = count
    else:
        drop = next((n for n in _DROPS if _entry(padded, min(n - 1, count)) <= cutoff), 0)
    start = max(count - (limit - 1), drop)
    return ring[start * WIDTH :] + str(now_us).rjust(WIDTH, "0")


def uses_in_window(ring: str, now_us: int, period_us: int) -> int:
    """How many kept times lie within the period before ``now_us`` (after
    ``now_us - period_us``): the kept times are in order, so a binary search."""
    count = _count(ring)
    times = _Times(ring)
    return count - bisect_right(times, now_us - period_us, 0, count)


def limit_th_newest(ring: str, limit: int) -> int:
    """The ``limit``-th newest time kept (the one a refused use waits for)."""
    return _entry(ring, max(_count(ring) - limit, 0))


def shifted(ring: str, by_us: int) -> str:
    """``ring`` with every kept time moved ``by_us`` microseconds earlier (the
    testing kit's clock; a time stays at or above 0)."""
    return "".join(
        str(max(_entry(ring, index) - by_us, 0)).rjust(WIDTH, "0") for index in range(_count(ring))
    )


def microseconds(moment_: datetime) -> int:
    """An aware datetime as microseconds since 1970."""
    return (moment_ - EPOCH) // timedelta(microseconds=1)


def moment(us: int) -> datetime:
    """Microseconds since 1970 as an aware datetime (UTC)."""
    return EPOCH + timedelta(microseconds=us)


class _Times:
    """The kept times of a ring as a sequence, read only where bisect looks."""

    def __init__(self, ring: str) -> None:
        self.ring = ring

    def __getitem__(self, index: int) -> int:
        return _entry(self.ring, index)

    def __len__(self) -> int:
        return _count(self.ring)
