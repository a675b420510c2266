"""Leader observers: ``observe_leader(resource)`` yields each new leader of a
resource as it changes (etcd's ``Observe``, client-go's ``OnNewLeader``),
without taking the lock or queuing for it, with reads alone.

A leader is the exclusive holder of the lock (``lock(..., auto_renew=True,
timeout=float("inf"), label=...)``, docs/usage.md "Leader election"); its term
is its hold's fencing token, which only ever grows.

How an observer learns of a change:

- A release of a lock that candidates wait for wakes the head of their queue
  (``django_dlock.locking.waiting``). Where the database lets several processes
  listen to one channel (PostgreSQL's ``LISTEN``, connected directly), the
  observer listens, through this process's listener, to the channel of that
  head (read from its ticket): the release that hands the lock over wakes the
  observer too. Then it looks at the leader's expiry (no release announces an
  expiry: a crashed leader), and every ``WAITER_TTL`` seconds, to follow a
  head that left the queue.
- Elsewhere (SQLite, whose wake-ups are datagrams to one process; MariaDB;
  behind PgBouncer; no candidate queued; nobody leading, where an acquisition
  wakes nobody) it looks as often as a polling waiter does at most
  (``DLOCK_BACKOFF_MAX``), and at the leader's expiry.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django_dlock.conf import conf
from django_dlock.listeners.base import Watch
from django_dlock.listeners.registry import listener_for
from django_dlock.locking.waiting import LISTEN_WAIT, WAITER_TTL
from django_dlock.locking.wakeup import Wakeup
from django_dlock.models import DistributedLock
from django_dlock.rules import SHARED_HOLDERS
from django_dlock.rules.clock import DatabaseNow
from django_dlock.service import service_for
from django_dlock.threads import run_in_lock_thread
from django_dlock.validators import validate_resource

__all__ = ["Leader", "aobserve_leader", "observe_leader"]

# How long after the leader's expiry (seconds) the observer looks: the look
# must find it expired by the database's clock, which it read a moment ago.
EXPIRY_MARGIN = 0.01


@dataclass(frozen=True)
class Leader:
    """Who leads: the holder's public ``label``, its ``term`` (the fencing
    token of its hold) and ``since`` when (``acquired_at``, the database's clock)."""

    label: str
    term: int
    since: datetime


@dataclass(frozen=True)
class Look:
    """One look at the resource: its leader (None: nobody leads), seconds until
    the leader's lease ends by the database's clock, and the channel a release
    wakes ("" for none)."""

    leader: Leader | None
    expires_in: float | None
    head_channel: str


class Observer:
    """The state of one observation: what was yielded last, how it is woken.
    ``step()`` looks once and answers the change to yield (if any) and how long
    to sleep; the sync and async iterators share it."""

    def __init__(self, resource: str, using: str | None, wakeup: Wakeup) -> None:
        self.resource = validate_resource(resource)
        self.using = using or conf.DATABASE
        self.wakeup = wakeup
        self.watch: Watch | None = None
        self.started = False  # the first state was yielded
        self.leading = False  # the last one yielded was a leader
        self.last_term: int | None = None  # the largest term yielded
        self.heard = ""  # the channel a release reached this observer on, at the last look

    def step(self) -> tuple[list[Leader | None], float]:
        """Look (once more where the channel to hear changed, so that no release
        falls between the look and the ``LISTEN``); the change since the last
        yield, and seconds to sleep."""
        self.wakeup.clear()
        look = self._look()
        channel = look.head_channel
        heard = self._hear(channel)
        if heard and channel != self.heard:
            # A release between the look and the LISTEN woke nobody here. (A
            # head that changed meanwhile: polled until the next step hears it.)
            look = self._look()
            heard = look.head_channel == channel
        self.heard = channel if heard else ""
        return self._changes(look.leader), self._sleep(look, heard=heard)

    def _changes(self, leader: Leader | None) -> list[Leader | None]:
        """What to yield: the first state, then a new term, or the end of one;
        never a term seen already (a renewal), never an older one."""
        first, self.started = not self.started, True
        if leader is None:
            if first or self.leading:
                self.leading = False
                return [None]
            return []
        if self.last_term is not None and leader.term <= self.last_term:
            return []
        self.last_term, self.leading = leader.term, True
        return [leader]

    def _sleep(self, look: Look, *, heard: bool) -> float:
        # Where a release wakes it, it looks again only to follow the head;
        # where nothing does, as often as a polling waiter looks.
        sleep = WAITER_TTL if look.leader is not None and heard else conf.BACKOFF_MAX
        if look.expires_in is not None:
            sleep = min(sleep, max(look.expires_in, 0.0) + EXPIRY_MARGIN)
        return sleep

    def _hear(self, channel: str) -> bool:
        """Listen to ``channel`` (the queue's head's); whether a release sent
        there reaches this observer now."""
        if self.watch is None and not channel:
            return False  # nothing to hear yet: no listener started for it
        listener = listener_for(self.using)
        if listener is None or not listener.shares_channels:
            return False
        if self.watch is None or self.watch.listener is not listener:
            self.close()  # (a listener stopped and started again)
            self.watch = listener.watch(self.wakeup, observer=True)
        return self.watch.overhear(channel, LISTEN_WAIT)

    def _look(self) -> Look:
        now = DatabaseNow()
        row = (
            DistributedLock.objects.using(self.using)
            .filter(resource=self.resource, limit__isnull=True, expires_at__gt=now)
            .exclude(owner__in=["", SHARED_HOLDERS])
            .annotate(now=now)
            .values_list("label", "fencing_token", "acquired_at", "expires_at", "now")
            .first()
        )
        # The head's channel only where it can be heard.
        channel = service_for(self.using).queue.head_channel(self.resource) if self.hearable else ""
        if row is None:
            return Look(None, None, channel)
        label, term, since, expires_at, db_now = row
        expires_in = (_aware(expires_at) - _aware(db_now)).total_seconds()
        return Look(Leader(label, term, _aware(since)), expires_in, channel)

    @property
    def hearable(self) -> bool:
        """Whether this process can listen to another's channel (PostgreSQL's
        listener, where it is usable)."""
        listener = listener_for(self.using)
        return listener is not None and listener.shares_channels

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None


def observe_leader(resource: str, *, using: str | None = None) -> Generator[Leader | None]:
    """Yield who leads ``resource``: first the leader now, then each new leader
    as it takes over (a ``Leader``, its ``term`` larger than every one yielded
    before), and ``None`` when a term ends with nobody leading (released,
    expired). Never the same term twice, never an older term, never ``None``
    twice in a row. Blocks between changes; stop by leaving the loop (or
    ``close()``). Reads only: it takes no lock and joins no queue."""
    observer = Observer(resource, using, Wakeup())
    try:
        while True:
            changes, sleep = observer.step()
            yield from changes
            observer.wakeup.wait(sleep)
    finally:
        observer.close()


async def aobserve_leader(
    resource: str, *, using: str | None = None
) -> AsyncGenerator[Leader | None]:
    """``observe_leader`` for ``async for``: it sleeps on the event loop and
    looks in django-dlock's worker threads."""
    observer = Observer(resource, using, Wakeup.on_loop())
    try:
        while True:
            changes, sleep = await run_in_lock_thread(observer.using, observer.step)
            for change in changes:
                yield change
            await observer.wakeup.sleep(sleep)
    finally:
        observer.close()


def _aware(value: Any) -> datetime:
    """A datetime as the backend returned it (SQLite: text for ``now``), aware."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
