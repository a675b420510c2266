"""The runs of a beat schedule, each claimed once in the lock table before it is sent.

A run is an entry's name and its due time. The due time must come out the same in every
beat process, whatever each one's own schedule state says (``PersistentScheduler`` keeps
a shelve file per process; a standby that takes over may last have run an entry hours
ago), so it is never read from ``entry.last_run_at``. It is the schedule's latest due
moment at or before now, from the schedule alone:

- an interval (``schedule=1.0``, ``timedelta``, ``celery.schedules.schedule``): a grid of
  its period counted from the Unix epoch, so ``1.0`` has whole seconds and 60 s whole
  minutes. ``LeaderScheduler`` also moves the entry's ``last_run_at`` onto that grid
  when it runs, so the wrapped scheduler sends on the grid and never drifts off it;
- any other schedule (``crontab``, ``solar``, django-celery-beat's ``clocked``): the
  latest moment it names, found by asking the schedule for its next moment after a
  point a minute, an hour, a day... back, then stepping forward to now.

The claim is an exclusive lock on ``celery-beat-run:<app>:<entry>@<due>`` taken with
``acquire()``, never waited for: the unique ``resource`` column lets one process take it.
Not ``once_per()``: sending a message is quick, so nothing needs renewing, and the claim
must outlast the run's whole period (below), not a window counted from when it was taken.
"""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from celery.schedules import BaseSchedule
from celery.schedules import schedule as interval

from django_dlock.conf import conf
from django_dlock.models import DistributedLock

__all__ = [
    "CATCH_UP",
    "CLAIM_MARGIN",
    "claim_run",
    "claim_seconds",
    "interval_due",
    "latest_due",
    "run_resource",
]

# How long a claim outlives the next due moment: the clocks of the beat hosts may differ
# by this much, and a process paused (SIGSTOP, a VM migration) between finding a run due
# and claiming it may come back this late, before the claim must still stand.
CLAIM_MARGIN = 60.0

# How far behind its interval entries (seconds, or one period if longer) a leader may
# fall (a busy host, a long GC pause) and still send each run it is late for, in turn;
# further behind, it sends the latest due one only, as Celery does with missed runs.
CATCH_UP = 3.0

# How far back ``latest_due`` looks for a schedule's latest moment, shortest first.
_LOOKBACKS = tuple(
    timedelta(seconds=seconds) for seconds in (60, 3600, 86400, 32 * 86400, 367 * 86400)
)
# Steps at most, forward from a look back, to the latest moment (a crontab of every
# minute looked back a day ahead of the first lookback that found it: never).
_MAX_STEPS = 1500


def latest_due(schedule: BaseSchedule, now: datetime) -> datetime:
    """The schedule's latest due moment at or before ``now`` (aware, UTC)."""
    now = now.astimezone(UTC)
    if isinstance(schedule, interval):
        period = float(schedule.seconds)
        if period <= 0:
            return now
        return datetime.fromtimestamp(math.floor(now.timestamp() / period) * period, UTC)
    for lookback in _LOOKBACKS:
        moment = _next_after(schedule, now - lookback)
        if moment > now:
            continue
        for _ in range(_MAX_STEPS):
            later = _next_after(schedule, moment)
            if later > now or later <= moment:
                break
            moment = later
        return moment
    return now.replace(microsecond=0)  # no moment in a year: the moment it was found due


def interval_due(schedule: interval, last_run_at: datetime, now: datetime) -> datetime:
    """The due time of the run of an interval entry that is due at ``now``: the next
    one on its grid after ``last_run_at`` when the leader is at most ``CATCH_UP``
    behind it, else the latest one. Either is a moment on the grid."""
    latest = latest_due(schedule, now)
    period = float(schedule.seconds)
    if period <= 0:
        return latest
    last = schedule.maybe_make_aware(last_run_at).timestamp()
    following = datetime.fromtimestamp((math.floor(last / period) + 1) * period, UTC)
    behind = (latest - following).total_seconds()
    return following if 0 < behind <= max(period, CATCH_UP) else latest


def _next_after(schedule: BaseSchedule, moment: datetime) -> datetime:
    """The schedule's next due moment after ``moment``, to the whole second: the
    schedule measures it from its own reading of the clock, a few microseconds on."""
    estimate = schedule.now().astimezone(UTC) + schedule.remaining_estimate(moment)
    return datetime.fromtimestamp(round(estimate.timestamp()), UTC)


def claim_seconds(schedule: BaseSchedule, due: datetime) -> float:
    """How long the claim of the run due at ``due`` lasts: until the schedule's next
    moment, when no process finds this run the latest due one any more, and
    ``CLAIM_MARGIN`` on; at most ``DLOCK_MAX_TTL``."""
    if isinstance(schedule, interval):
        period = float(schedule.seconds)
    else:
        period = (_next_after(schedule, due) - due).total_seconds()
        if period <= 0:  # a moment that never comes again (clocked): as long as may be
            period = math.inf
    return float(min(max(period, 0.0) + CLAIM_MARGIN, conf.MAX_TTL))


def run_resource(app_name: str, entry_name: str, due: datetime) -> str:
    """The claim's lock name: readable where the entry's name allows, at most 255
    characters (a long name is cut and told apart by a hash of it)."""
    name = quote(entry_name, safe="-_.:~")
    if len(name) > 150:
        digest = hashlib.sha256(entry_name.encode()).hexdigest()[:16]
        name = f"{name[:120]}~{digest}"
    stamp = due.astimezone(UTC).strftime("%Y%m%dT%H%M%S")
    if due.microsecond:
        stamp += f".{due.microsecond:06d}".rstrip("0")
    return f"celery-beat-run:{quote(app_name, safe='-_.')[:60]}:{name}@{stamp}Z"


def claim_run(
    app_name: str, entry_name: str, schedule: BaseSchedule, due: datetime, label: str
) -> bool:
    """Claim the run of ``entry_name`` due at ``due``: True for the one process that
    may send it, False for every other (it was claimed already). A database error
    raises. A run found due so late that its claim could have expired already (only
    a schedule whose period is longer than ``DLOCK_MAX_TTL``) is never claimed."""
    seconds = claim_seconds(schedule, due)
    late = (datetime.now(UTC) - due).total_seconds()
    if late >= seconds - CLAIM_MARGIN / 2:
        return False
    resource = run_resource(app_name, entry_name, due)
    return DistributedLock.objects.acquire(resource, ttl=seconds, label=label) is not None
