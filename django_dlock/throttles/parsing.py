"""Throttle rates: "at most N uses per period", written as DRF writes them.

``"10/m"`` is ten uses a minute. The unit is ``s``, ``m``, ``h`` or ``d``
(also spelt ``sec``, ``second(s)``, ``min``, ``minute(s)``, ``hour(s)``,
``day(s)``), and may carry a count: ``"5/10m"`` is five uses in any ten
minutes. A name without ``/`` is looked up in ``DLOCK_THROTTLE_RATES``, so that
a project can change its rates in its settings.
"""

from __future__ import annotations

import re
from datetime import timedelta
from functools import cache

from django_dlock.conf import conf
from django_dlock.exceptions import InvalidArgument
from django_dlock.throttles.rate import Rate

__all__ = ["MAX_LIMIT", "MAX_PERIOD", "parse_rate", "resolve_rate"]

# A key's row keeps the time of each use in its window, 16 bytes each, and a
# use copies it when it writes (rules.throttle): at most 160 KB.
MAX_LIMIT = 10_000
# The longest period: a use's free_at (its time plus the period) stays far
# from the end of what a datetime holds.
MAX_PERIOD = timedelta(days=3650)
# How long a written rate may be: each use stores it (ThrottleSlot.rate).
MAX_TEXT = 32

_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
}
_RATE = re.compile(r"(?P<limit>\d+)\s*/\s*(?P<count>\d*)\s*(?P<unit>[a-z]+)")


def _invalid(rate: object, problem: str) -> InvalidArgument:
    return InvalidArgument(
        f"{rate!r} is not a throttle rate: {problem}. Write the number of uses and the "
        'period, e.g. "10/m" (ten a minute), "100/h", "5/10m" (five in any ten minutes), '
        "or the name of a rate in DLOCK_THROTTLE_RATES.",
        code="rate",
    )


@cache
def parse_rate(text: str) -> Rate:
    """The ``Rate`` that ``text`` ("10/m", "5/10m") writes; ``InvalidArgument``
    when it writes none."""
    if len(text.strip()) > MAX_TEXT:
        raise _invalid(text, f"it is longer than {MAX_TEXT} characters")
    match = _RATE.fullmatch(text.strip().lower())
    if match is None:
        raise _invalid(text, "it is not a number of uses, a '/' and a period")
    unit = _UNITS.get(match["unit"])
    if unit is None:
        raise _invalid(text, f"{match['unit']!r} is not a unit (s, m, h or d)")
    limit, count = int(match["limit"]), int(match["count"] or 1)
    if not 1 <= limit <= MAX_LIMIT:
        raise _invalid(text, f"the number of uses must be 1 to {MAX_LIMIT}")
    if not 1 <= count * unit <= MAX_PERIOD.total_seconds():
        raise _invalid(text, "the period must be one second to 3650 days")
    return Rate(limit=limit, period=timedelta(seconds=count * unit), text=text.strip())


def resolve_rate(rate: str | Rate) -> Rate:
    """``rate`` as a ``Rate``: written out ("10/m"), or the name of one in
    ``DLOCK_THROTTLE_RATES``, read now (so that a changed setting applies to
    the next use). Raises ``InvalidArgument`` for anything else."""
    if isinstance(rate, Rate):
        return rate
    if not isinstance(rate, str):
        raise _invalid(rate, "it is not a string")
    if "/" in rate:
        return parse_rate(rate)
    rates = conf.THROTTLE_RATES
    if not isinstance(rates, dict) or rate not in rates:
        raise _invalid(rate, "it has no '/', and DLOCK_THROTTLE_RATES has no rate of that name")
    written = rates[rate]
    if not isinstance(written, str) or "/" not in written:
        raise _invalid(written, f"DLOCK_THROTTLE_RATES[{rate!r}] must be a rate such as '10/m'")
    return parse_rate(written)
