"""Throttles of the lock API, with rates from DRF's ``DEFAULT_THROTTLE_RATES``:

- ``"dlock"``: every call of the lock API, per user (per client address for
  anonymous calls).
- ``"dlock-owner-failure"``: renewals and releases refused because the owner
  did not match (409 and 403). Each refusal counts; once the rate is used up,
  the user's renewals and releases get 429 until it frees up. This bounds how
  fast owner tokens can be guessed.

A scope without a rate is not throttled.
"""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

CALL_SCOPE = "dlock"
OWNER_FAILURE_SCOPE = "dlock-owner-failure"


class LockScopeThrottle(SimpleRateThrottle):
    """A throttle of one scope of the lock API, per user or client address."""

    # Set by SimpleRateThrottle (__init__ and allow_request).
    num_requests: int | None
    duration: int | None
    history: list[float]
    now: float

    def get_rate(self) -> str | None:
        # Read at each request (not at import, as SimpleRateThrottle.THROTTLE_RATES
        # is), so that override_settings and settings changes apply.
        rates: Any = getattr(api_settings, "DEFAULT_THROTTLE_RATES", None) or {}
        rate = rates.get(self.scope)
        return None if rate is None else str(rate)

    def get_cache_key(self, request: Request, view: Any) -> str:
        user = request.user
        ident = user.pk if user and user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def wait(self) -> float:
        """Seconds until the next call is allowed: never ``None`` or 0, so the
        429 always carries a ``Retry-After``."""
        if self.num_requests is None or self.duration is None:
            return 1.0  # no rate: never throttled, never asked
        if len(self.history) < self.num_requests:
            return 1.0
        # history is newest first: the call is allowed again once the
        # num_requests-th newest entry leaves the window.
        oldest_counted = self.history[self.num_requests - 1]
        return max(1.0, self.duration - (self.now - oldest_counted))


class LockCallThrottle(LockScopeThrottle):
    scope = CALL_SCOPE


class OwnerFailureThrottle(LockScopeThrottle):
    """Refuses once the user's failed owner checks used up the rate; counts
    only failures (:meth:`record_failure`), never the calls themselves."""

    scope = OWNER_FAILURE_SCOPE

    def throttle_success(self) -> bool:
        return True  # a call is not a failure: nothing to record yet

    def record_failure(self, request: Request, view: Any) -> None:
        if self.rate is None or self.duration is None:
            return
        key = self.get_cache_key(request, view)
        now = self.timer()
        history = [t for t in self.cache.get(key, []) if t > now - self.duration]
        history.insert(0, now)
        self.cache.set(key, history, self.duration)
