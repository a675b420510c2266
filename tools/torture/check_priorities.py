"""Invariant 17: no waiter is passed over by one with a worse key.
``lock(priority=N)`` queues a waiter at its key, the database's time of
queuing less N minutes (``backends/queue.py``, ``ticket_sql``), and the live
waiter with the smallest key is the next to get the lock once it is free. So
when a waiter W is granted, no waiter V of the same resource with a smaller
key may still be waiting whose ticket was in the queue before the lock came
free for W.

Only what the history proves counts:

- A key lies between the database's clock read before the ticket's INSERT
  and after its commit, less N minutes (``queued``: ``db0``, ``db1``). V's
  key is smaller than W's only when the upper end of V's lies ``MARGIN``
  below the lower end of W's. A W granted without queuing (it found the
  lock free and nobody queued) has no key: every queued V is ahead of it.
- The lock came free for W at the end of the grant before W's (token less
  one; W is not judged when no recorded grant has it: a grant nobody
  recorded came between, such as a hand-over offer that lapsed): its
  holder's release (a call that answered "released" or raised: from its
  ``t0``), a force-release, or its expiry (its latest recorded
  ``expires_at``), whichever came first. V's ticket was in the queue before
  that when it committed before each of them: its ``queued`` ``t`` before the
  calls' ``t0``, its ``db1`` before the expiry. Every way to W's grant then
  met V's ticket: a release that hands the lock over picks the first live
  ticket, a look that admits W counts the live tickets before W's (all of
  them, without a ticket), and a waiter woken as the head was named by such
  a release.
- V still waited at W's grant: it got the lock later (a larger token), or
  its wait timed out (``LockNotAcquired``) with its deadline (its ``t0`` plus
  its timeout) after W's call returned. Its ticket was its last: a waiter
  whose ticket was dropped (passed as a stalled head, expired) queues again,
  which moves its last ``queued`` past the lock's coming free.

Not judged: waits that raised otherwise or were killed (no outcome), a V
whose ticket's time was not read, and pairs over which a fault struck (a
restart or a terminated session leaves tickets whose listener's or waiter's
session is gone, which do not count until it is back), up to ``SETTLE``
after it (``_fault_spans``).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tools.torture.history import Event
from tools.torture.sections import Acquisition, History, when
from tools.torture.violations import Violation

# A step of priority is worth a minute of waiting (``backends.tickets.PRIORITY_STEP``).
STEP = timedelta(minutes=1)
# How far apart two keys must be to tell them apart: SQLite's clock ticks in
# milliseconds, and its ticket's time passes through a float of julianday.
MARGIN = timedelta(milliseconds=2)
# After a fault ends, waiters' listeners may still be reconnecting (seconds).
SETTLE = 5.0


@dataclass(frozen=True)
class Waiter:
    """A wait of ``lock(priority=N)`` and its last ticket's ``queued`` event."""

    call: Event
    queued: Event | None

    @property
    def priority(self) -> int:
        return int((self.queued or self.call).get("priority") or 0)

    def key(self, bound: str) -> datetime | None:
        """The lower (``db0``) or upper (``db1``) end of its ticket's key."""
        if self.queued is None or not self.queued.get(bound):
            return None
        return when(self.queued[bound]) - self.priority * STEP


@dataclass
class Grant:
    """A grant judged: the waiters provably queued, live and still waiting
    when the lock came free for it (``ahead``), and which of them had a
    smaller key (``passed``)."""

    grant: Acquisition
    waiter: Waiter
    ahead: list[Waiter] = field(default_factory=list)
    passed: list[Waiter] = field(default_factory=list)


def grants(history: History) -> Iterator[Grant]:
    """Every grant of a resource that waiters with priorities wait for, whose
    previous grant is recorded, with the waiters it was compared with."""
    last_queued = _last_tickets(history)
    faults = _fault_spans(history)
    for resource, calls in history.calls.items():
        waits = [c for c in calls if c["op"] == "lock" and "priority" in c and c.get("owner")]
        if not waits:
            continue
        waiters = sorted(
            (Waiter(c, last_queued.get((resource, c["owner"]))) for c in waits),
            key=lambda w: w.call["t0"],
        )
        starts = [w.call["t0"] for w in waiters]
        longest = max(w.call["t1"] - w.call["t0"] for w in waiters)
        by_owner = {w.call["owner"]: w for w in waiters}
        fresh = [a for a in history.acquisitions.get(resource, []) if not a.regrant]
        by_token = {a.token: a for a in fresh}
        ends = _Ends(history, resource, calls)
        for granted in fresh:
            previous = by_token.get(granted.token - 1)
            waiter = by_owner.get(granted.owner)
            if previous is None or waiter is None or waiter.call is not granted.event:
                continue
            freed_t, freed_at = ends.of(previous, granted.t1)
            judged = Grant(granted, waiter)
            lower = waiter.key("db0")
            if waiter.queued is not None and lower is None:
                continue  # its own ticket's time was not read
            first = bisect.bisect_left(starts, granted.t0 - longest)
            for other in waiters[first : bisect.bisect_right(starts, granted.t1)]:
                if not _was_ahead(other, granted, freed_t, freed_at, faults):
                    continue
                judged.ahead.append(other)
                upper = other.key("db1")
                if upper is not None and (lower is None or upper + MARGIN < lower):
                    judged.passed.append(other)
            yield judged


def priorities(history: History) -> Iterable[Violation]:
    for judged in grants(history):
        granted, waiter = judged.grant, judged.waiter
        for other in judged.passed:
            lower, upper = waiter.key("db0"), other.key("db1")
            by = (
                ""
                if lower is None or upper is None
                else f" by {(lower - upper).total_seconds():.3f} s"
            )
            yield Violation(
                17,
                f"{granted.resource}: {granted.owner} (priority {waiter.priority}, "
                f"{'queued' if waiter.queued else 'never queued'}) granted token {granted.token} "
                f"while {other.call['owner']} (priority {other.priority}), queued before the "
                f"lock came free with a smaller key{by}, still waited",
                (granted.event, other.call),
            )


def _was_ahead(
    other: Waiter,
    granted: Acquisition,
    freed_t: float,
    freed_at: datetime,
    faults: list[tuple[float, float, str | None]],
) -> bool:
    """Whether ``other``'s last ticket was provably live in the queue from
    before the lock came free until after ``granted``."""
    call, queued = other.call, other.queued
    if call["p"] == granted.event["p"] or queued is None or not queued.get("db1"):
        return False
    if not (queued["t"] < freed_t and when(queued["db1"]) < freed_at):
        return False
    lock = call.get("lock")
    if lock is not None:
        still = lock["token"] > granted.token
    else:
        error = call.get("error") or {}
        deadline = call["t0"] + float(call.get("timeout") or 0)
        still = error.get("class") == "LockNotAcquired" and deadline > granted.t1
    if not still:
        return False
    struck = (call["p"], granted.event["p"], None)
    return not any(
        t0 <= granted.t1 and queued["t"] <= t1 and scope in struck for t0, t1, scope in faults
    )


class _Ends:
    """When a resource's grants ended, at the earliest: the releases of their
    holders and the force-releases, by start, and their recorded expiries."""

    def __init__(self, history: History, resource: str, calls: list[Event]) -> None:
        self.releases: dict[str, list[float]] = defaultdict(list)
        self.forces: list[tuple[float, float]] = []
        for call in calls:
            ended = call.get("result") == "released" or "error" in call
            if call["op"] in ("release", "unlock") and ended:
                self.releases[call["owner"]].append(call["t0"])
            elif call["op"] == "force_release" and (call.get("released") or "error" in call):
                self.forces.append((call["t0"], call["t1"]))
        self.expiries: dict[tuple[str, int], datetime] = {}
        for section in history.sections.values():
            if section.resource == resource:
                key = (section.owner, section.token)
                self.expiries[key] = max(
                    self.expiries.get(key, section.expires_at), section.expires_at
                )

    def of(self, hold: Acquisition, until: float) -> tuple[float, datetime]:
        """The earliest a release or force-release of ``hold`` may have ended
        it (monotonic; inf for none), and its expiry (the database's clock)."""
        released = [t for t in self.releases.get(hold.owner, []) if t >= hold.t0]
        forced = [t0 for t0, t1 in self.forces if t1 >= hold.t0 and t0 <= until]
        expiry = max(hold.expires_at, self.expiries.get((hold.owner, hold.token), hold.expires_at))
        return min([*released, *forced], default=math.inf), expiry


def _last_tickets(history: History) -> dict[tuple[str, str], Event]:
    """The last ``queued`` event of each wait (resource and owner)."""
    last: dict[tuple[str, str], Event] = {}
    for event in history.events:
        if event["op"] == "queued":
            key = (event["resource"], event["owner"])
            if key not in last or event["t"] >= last[key]["t"]:
                last[key] = event
    return last


def _fault_spans(history: History) -> list[tuple[float, float, str | None]]:
    """The spans of the faults that may drop live tickets, and the process
    each struck (None: every process). A restart ends every session, the
    listeners' too: until ``SETTLE`` after it. A fault of one process (a
    terminated session, a signal) only strikes its waits, also until
    ``SETTLE`` after it. Any other (read-only, skewed clocks) only while it
    lasts."""
    spans: list[tuple[float, float, str | None]] = []
    for event in history.events:
        if event["op"] != "fault" or not event.get("t1"):
            continue
        t0, t1, scope = float(event["t0"]), float(event["t1"]), event.get("scope")
        settle = SETTLE if scope or str(event.get("kind")).startswith("restart") else 0.0
        spans.append((t0, t1 + settle, scope))
    return spans
