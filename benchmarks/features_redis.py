"""The nearest peers of ``throttle()``: rate limiters on Redis, as Python
projects write them, on the redis-server the benchmark starts.

- **Fixed window** (django-ratelimit's cache counter, ``limits``'
  ``FixedWindowRateLimiter``): ``INCR`` a key named by the window's number and
  ``EXPIRE`` it, in one pipeline (one round trip); granted while the count is
  at most the limit. Up to twice the limit can pass within one period that
  straddles two windows.
- **Sliding window** (``limits``' ``MovingWindowRateLimiter``): a sorted set of
  the uses' times, trimmed to the last period, counted and added to by one Lua
  script (one round trip, atomic on the server), on Redis's clock. Exact, as
  ``throttle()`` is.

Each returns ``(granted, at)``: ``at`` the use's time in seconds, Redis's for
the sliding window, the client's for the fixed one (its window is the client's
too), so that a crowd's admissions can be checked per window.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from typing import Any

Limiter = Callable[[str], tuple[bool, float]]

# KEYS[1]: the set; ARGV: period (microseconds), limit, a unique member.
# Redis 7 replicates a script's effects, so reading TIME before writing is allowed.
_SLIDING = """
local now = redis.call('TIME')
local at = tonumber(now[1]) * 1000000 + tonumber(now[2])
local period = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', at - period)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], at, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(period / 1000))
  return {1, at}
end
return {0, at}
"""


def client(port: int) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port)


def fixed_window(port: int, limit: int, period: float) -> Limiter:
    """``INCR`` + ``EXPIRE`` of ``{key}:{window number}`` in a pipeline."""
    redis = client(port)

    def use(key: str) -> tuple[bool, float]:
        now = time.time()
        name = f"rl:fixed:{key}:{int(now // period)}"
        pipe = redis.pipeline(transaction=True)
        pipe.incr(name)
        pipe.expire(name, int(period) + 1)
        count, _ = pipe.execute()
        return int(count) <= limit, now

    return use


def sliding_window(port: int, limit: int, period: float) -> Limiter:
    """A sorted set of the uses' times, in one Lua script on Redis's clock."""
    redis = client(port)
    script = redis.register_script(_SLIDING)
    members = itertools.count()
    pid = os.getpid()

    def use(key: str) -> tuple[bool, float]:
        granted, at = script(
            keys=[f"rl:sliding:{key}"],
            args=[int(period * 1_000_000), limit, f"{pid}:{next(members)}"],
        )
        return bool(granted), int(at) / 1_000_000

    return use


LIMITERS: dict[str, Callable[[int, int, float], Limiter]] = {
    "Redis fixed window": fixed_window,
    "Redis sliding window": sliding_window,
}
