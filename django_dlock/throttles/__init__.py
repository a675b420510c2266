"""Throttles: at most N uses of a key per period, decided on the database's clock.

``throttle(key, rate)`` (``context``) is the interface; ``rate`` is the value of
a rate and ``parsing`` reads it from text ("10/m"); ``slots`` keeps the uses and
decides each one; ``purge`` deletes the keys whose uses all left their window.
"""

from __future__ import annotations

from django_dlock.throttles.context import throttle
from django_dlock.throttles.rate import Rate
from django_dlock.throttles.slots import ThrottleDecision

__all__ = ["Rate", "ThrottleDecision", "throttle"]
