"""Invariant 16: no grant inside a lock-delay. An exclusive hold taken with
``lock_delay=d`` that its holder lost rather than released (its lease ran
out, or an operator force-released it) keeps the resource from everyone
until its last ``expires_at`` (the force-release's moment) + d, on the
database's clock: the next grant of the resource, of any kind, has an
``acquired_at`` no earlier.

What the history tells is bounded on the safe side. A hold counts as lost
when no release of its owner answered "released" or raised (a release that
raised may have committed, which clears the delay). Its last ``expires_at``
is the latest one recorded (an auto-renewer's renewals are not, and an
earlier expiry only makes the check weaker). A force-release of it
(``released``, or raised: it may have committed) that may have run between
the hold's grant and the next one moves the start back to the database's
clock read before that call (``db_now``), or to the hold's grant when there
is none. A ``lock()`` grant does not say its ``acquired_at``: its expiry less
its ttl stands for it, which is the grant or later.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from tools.torture.history import Event
from tools.torture.sections import EXCLUSIVE, Acquisition, History, when
from tools.torture.violations import Violation

# What a release of its owner answers when it cleared the delay (or may have).
_RELEASED = "released"


@dataclass(frozen=True)
class Loss:
    """An exclusive hold with a lock-delay that its holder did not release."""

    hold: Acquisition
    delay: timedelta
    start: datetime  # the delay runs from here (at the latest)
    forced: bool  # a force-release may have ended it
    following: Acquisition | None  # the resource's next grant


def losses(history: History) -> Iterator[Loss]:
    """Every hold with a lock-delay that was lost, with the grant after it."""
    expires: dict[tuple[str, str, int], datetime] | None = None
    for resource, acquisitions in history.acquisitions.items():
        grants = sorted((a for a in acquisitions if not a.regrant), key=lambda a: a.token)
        delayed = [a for a in grants if a.event.get("lock_delay") and a.mode == EXCLUSIVE]
        if not delayed:
            continue
        released, forces = _ends(history.calls.get(resource, []))
        expires = _expiries(history) if expires is None else expires
        following = dict(zip((a.token for a in grants), grants[1:], strict=False))
        for hold in delayed:
            if hold.owner in released:
                continue
            after = following.get(hold.token)
            last = expires.get((resource, hold.owner, hold.token), hold.expires_at)
            start = max(hold.expires_at, last)
            forced = False
            for force in forces.between(hold.t0, math.inf if after is None else after.t1):
                if force.get("owner") not in (None, hold.owner):
                    continue
                moment = when(force["db_now"]) if force.get("db_now") else granted_at(hold)
                start, forced = min(start, moment), True
            delay = timedelta(seconds=float(hold.event["lock_delay"]))
            yield Loss(hold, delay, start, forced, after)


def delays(history: History) -> Iterable[Violation]:
    for loss in losses(history):
        if loss.following is None:
            continue
        taken = granted_at(loss.following)
        available = loss.start + loss.delay
        if taken < available:
            hold, how = loss.hold, "force-released" if loss.forced else "expired"
            yield Violation(
                16,
                f"{hold.resource}: token {loss.following.token} ({loss.following.mode}) granted "
                f"at {taken.isoformat()}, {(available - taken).total_seconds():.6f} s inside "
                f"the lock-delay of {loss.delay.total_seconds():g} s of token {hold.token}, "
                f"{how} at {loss.start.isoformat()} (not released by its holder)",
                (hold.event, loss.following.event),
            )


def granted_at(acquisition: Acquisition) -> datetime:
    """When ``acquisition`` was granted, on the database's clock (or later)."""
    if acquisition.acquired_at is not None:
        return acquisition.acquired_at
    ttl = acquisition.event.get("ttl")
    if ttl is None:  # not said: its expiry is later still
        return acquisition.expires_at
    return acquisition.expires_at - timedelta(seconds=float(ttl))


class _Forces:
    """A resource's force-releases that may have released a hold, by start."""

    def __init__(self, calls: list[Event]) -> None:
        self.calls = sorted(calls, key=lambda call: call["t0"])
        self.starts = [call["t0"] for call in self.calls]
        self.longest = max((call["t1"] - call["t0"] for call in calls), default=0.0)

    def between(self, t0: float, t1: float) -> list[Event]:
        """Those whose call overlapped the span from ``t0`` to ``t1`` (monotonic)."""
        first = bisect_left(self.starts, t0 - self.longest)
        last = bisect_right(self.starts, t1)
        return [call for call in self.calls[first:last] if call["t1"] >= t0]


def _ends(calls: list[Event]) -> tuple[set[str], _Forces]:
    """The owners whose release cleared a delay (or may have), and the
    force-releases that may have released a hold."""
    released: set[str] = set()
    forces: list[Event] = []
    for call in calls:
        op = call["op"]
        if op in ("release", "unlock") and (call.get("result") == _RELEASED or "error" in call):
            released.add(call["owner"])
        elif op == "force_release" and (call.get("released") or "error" in call):
            forces.append(call)
    return released, _Forces(forces)


def _expiries(history: History) -> dict[tuple[str, str, int], datetime]:
    """The latest recorded expiry of each exclusive section, by resource,
    owner and token (renewals included)."""
    latest: dict[tuple[str, str, int], datetime] = {}
    for section in history.sections.values():
        if section.exclusive:
            key = (section.resource, section.owner, section.token)
            latest[key] = max(latest.get(key, section.expires_at), section.expires_at)
    return latest
