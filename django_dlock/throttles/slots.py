"""Where throttles keep their uses, and the decision of each use.

A key has one row in ``distributed_lock_throttle_slots`` (``ThrottleSlot``, its
slot 0), which keeps the times of its last uses, at most N for a rate of N per
period. A use is one statement (``LockService.use_throttle``; the SQL is each
backend's, ``backends/<vendor>/throttles.py``), sent in autocommit, that:

1. inserts the key's row with the use, for a key's first use; or else locks
   the key's row (every use of the key waits here, so uses of one key are
   decided one at a time) and reads the database's now once the lock is
   granted, so that it is later than the last use's;
2. grants when fewer than N times are kept or the N-th newest left the window
   (it is a period old or more), keeping the N - 1 newest times and its own;
   else refuses, writing only the time of the refusal (``rules.throttle``);
3. answers the kept times and the refusal's time.

Every use within the last period keeps its time (only times older than the
N-th newest are dropped), so the count is exact, and no window of one period
ever holds more than N granted uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django_dlock.models import ThrottleSlot
from django_dlock.rules.throttle import WIDTH, limit_th_newest, moment, uses_in_window
from django_dlock.service import service_for
from django_dlock.signals import throttle_used
from django_dlock.throttles.rate import Rate

__all__ = ["ThrottleDecision", "decide"]


@dataclass(frozen=True)
class ThrottleDecision:
    """What a throttle decided for one use of ``key``; true when granted.

    ``at`` is the database's time of the decision (a granted use's time).
    ``retry_after`` is zero when granted; when refused, the time from ``at``
    until the oldest use in the window leaves it. ``remaining`` is how many
    more uses the window has room for now.
    """

    key: str
    rate: Rate
    granted: bool
    at: datetime
    retry_after: timedelta
    remaining: int

    def __bool__(self) -> bool:
        return self.granted


def decide(key: str, rate: Rate, using: str) -> ThrottleDecision:
    """Grant a use of ``key`` under ``rate`` (recording it) or refuse it, in one
    statement of its own on ``using``. Raises ``LockTransactionError`` inside a
    transaction the caller has open; a database failure raises. Sends
    ``throttle_used`` once the decision is committed."""
    answer = service_for(using).use_throttle(key, rate.limit, rate.period, str(rate))
    period_us = rate.period // timedelta(microseconds=1)
    if answer.refused_us is None:
        now_us = int(answer.ring[-WIDTH:])  # the granted use's time, kept last
        remaining = rate.limit - uses_in_window(answer.ring, now_us, period_us)
        decision = ThrottleDecision(key, rate, True, moment(now_us), timedelta(0), remaining)
    else:
        now_us = answer.refused_us
        # The window has room again once the limit-th newest use left it.
        frees_us = limit_th_newest(answer.ring, rate.limit) + period_us
        retry_after = timedelta(microseconds=frees_us - now_us)
        decision = ThrottleDecision(key, rate, False, moment(now_us), retry_after, 0)
    throttle_used.send(
        sender=ThrottleSlot,
        key=key,
        rate=rate,
        granted=decision.granted,
        retry_after=decision.retry_after,
    )
    return decision
