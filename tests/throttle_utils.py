"""Helpers of the throttle tests: a key's kept uses, read and aged by the database's clock."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection

from django_dlock.models import ThrottleSlot
from django_dlock.rules.clock import database_now
from django_dlock.rules.throttle import WIDTH, microseconds, moment


def kept(key: str) -> list[datetime]:
    """The times of the uses ``key`` keeps, oldest first."""
    ring = ThrottleSlot.objects.get(key=key, slot=0).ring
    return [moment(int(ring[i : i + WIDTH])) for i in range(0, len(ring), WIDTH)]


def used_ago(key: str, seconds: list[float], *, period: float = 60) -> None:
    """Make the uses ``key`` keeps ``seconds`` old (one number each, oldest
    first once sorted), by the database's clock; the key's last use and when
    it frees follow (``period``: the rate's, in seconds)."""
    now = microseconds(database_now(connection.alias))
    times = sorted(now - round(ago * 1_000_000) for ago in seconds)
    ring = "".join(str(us).rjust(WIDTH, "0") for us in times)
    last = moment(times[-1])
    ThrottleSlot.objects.filter(key=key, slot=0).update(
        ring=ring, used_at=last, free_at=last + timedelta(seconds=period)
    )
