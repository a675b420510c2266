"""Throttles: at most N uses of a key per period, decided on the database's clock.

``throttle(key, rate)`` (``context``) is the interface; ``rates`` reads the
rates, ``slots`` keeps the uses and decides each one.
"""

from __future__ import annotations

from django_dlock.throttles.context import throttle
from django_dlock.throttles.rate import Rate
from django_dlock.throttles.slots import ThrottleDecision

__all__ = ["Rate", "ThrottleDecision", "throttle"]
