"""``Renewer``: the automatic renewal of ``lock(..., auto_renew=True)``.

One renewer thread per process and database alias serves every such lock. Each
lock wants a renewal every ttl/3; the thread sleeps until the first is due, then
renews every lock that is due (or nearly) together, in one statement per ttl, on
one connection. The thread and its connection exist only while some lock is
renewed. Any failed renewal (expired, taken over, released, purged, or a
database error) marks exactly the locks it concerns lost, and stops renewing
them: past that point their holders cannot know that they still hold them.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from django.db import DatabaseError, connections

from django_dlock.locking.renewal import RenewalFailure, outcome_of, renew_lock
from django_dlock.per_alias import PerAlias
from django_dlock.rules import Hold
from django_dlock.service import service_for

if TYPE_CHECKING:
    from django_dlock.locking.handle import LockHandle


class Renewed(Protocol):
    """What the renewer needs of a held lock (``LockHandle``)."""

    resource: str
    owner: str
    ttl: float

    def record_renewal(self, lock: Hold, started: float, ttl: float) -> None: ...

    def mark_lost(self, reason: str) -> None: ...


class Renewer:
    """The renewals of one held lock: ``start()`` after acquiring, ``stop()``
    before releasing (a renewal in flight then no longer touches the handle).

    A hold granted for a short ``lease`` (``locking.told``) from ``started``
    is extended to its ttl a quarter of the lease in; ``once``: only then (a
    lock without ``auto_renew``)."""

    def __init__(
        self,
        handle: LockHandle,
        *,
        lease: float | None = None,
        started: float = 0.0,
        once: bool = False,
    ) -> None:
        self.handle = handle
        self.due = None if lease is None else started + lease / 4
        self.once = once

    def start(self) -> None:
        renewal_thread(self.handle.using).add(self.handle, due=self.due, once=self.once)

    def stop(self) -> None:
        renewal_thread(self.handle.using).remove(self.handle)


def start_renewer(
    handle: LockHandle, *, auto_renew: bool, lease: float | None, started: float
) -> Renewer | None:
    """The renewer of a hold just taken, started: ``auto_renew``'s, and that of
    a hold granted for a short ``lease`` from ``started`` (``locking.told``),
    whose handle counts that lease until the renewer extends it to the ttl."""
    renewer = None
    if lease is not None:
        handle.deadline = started + lease
        handle.handed_over = True
        renewer = Renewer(handle, lease=lease, started=started, once=not auto_renew)
    elif auto_renew:
        renewer = Renewer(handle)
    if renewer is not None:
        renewer.start()
    return renewer


# Seconds the thread stays after a told grant's hold left (``locking.told``).
LINGER = 1.0


class RenewalThread:
    """The renewer of one alias: ``add()`` a handle to renew it, ``remove()`` to stop."""

    def __init__(self, using: str, renew: RenewFunction) -> None:
        self.using = using
        self._renew = renew
        self._due: dict[Renewed, float] = {}  # handle -> monotonic time of its next renewal
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._in_flight: set[Renewed] = set()  # the handles of the batch being renewed
        self._once: set[Renewed] = set()  # renewed once, then no longer
        self._linger_until = 0.0  # monotonic time until which the thread waits for more

    def add(self, handle: Renewed, *, due: float | None = None, once: bool = False) -> None:
        """Renew ``handle`` every third of its ttl (the first at ``due``, where
        earlier); ``once``: only the first time."""
        with self._condition:
            every = time.monotonic() + handle.ttl / 3
            self._due[handle] = every if due is None else min(due, every)
            if once:
                self._once.add(handle)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"django-dlock renewer {self.using}", daemon=True
                )
                self._thread.start()
            self._condition.notify()

    def remove(self, handle: Renewed) -> None:
        """Stop renewing ``handle``. A renewal of it in flight ends first (the
        loss it may find is announced before this returns); then nothing
        touches the handle any more."""
        with self._condition:
            self._due.pop(handle, None)
            if handle in self._once:
                # Turns on a contended lock follow each other: the thread
                # stays a moment for the next rather than start again.
                self._once.discard(handle)
                self._linger_until = time.monotonic() + LINGER
            self._condition.notify_all()
            if threading.current_thread() is not self._thread:
                self._condition.wait_for(lambda: handle not in self._in_flight)

    def _run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                started = time.monotonic()
                try:
                    outcomes = self._renew(self.using, batch)
                except Exception as error:
                    outcomes = [f"renewing it failed: {error!r}"] * len(batch)
                lost: list[tuple[Renewed, str]] = []
                with self._condition:
                    for handle, outcome in zip(batch, outcomes, strict=True):
                        if handle not in self._due:
                            continue  # released meanwhile: the outcome is the holder's
                        if isinstance(outcome, str):
                            del self._due[handle]
                            lost.append((handle, outcome))
                        else:
                            handle.record_renewal(outcome, started, handle.ttl)
                            if handle in self._once:
                                self._once.discard(handle)
                                del self._due[handle]
                for handle, reason in lost:  # signals go out without the lock held
                    handle.mark_lost(reason)
                with self._condition:
                    self._in_flight.clear()
                    self._condition.notify_all()
        finally:
            connections[self.using].close()

    def _next_batch(self) -> list[Renewed] | None:
        """Wait until some lock is due; ``None`` (and the thread ends) once none is renewed."""
        with self._condition:
            while True:
                if not self._due:
                    idle = self._linger_until - time.monotonic()
                    if idle > 0:  # a told grant's turn just ended: another may come
                        self._condition.wait(idle)
                        continue
                    self._thread = None
                    return None
                now = time.monotonic()
                first = min(self._due.values())
                if first <= now:
                    batch = [
                        handle
                        for handle, due in self._due.items()
                        if due <= now + handle.ttl / 12  # nearly due: renew it now too
                    ]
                    for handle in batch:
                        self._due[handle] = now + handle.ttl / 3
                    self._in_flight.update(batch)
                    return batch
                self._condition.wait(first - now)


class RenewFunction(Protocol):
    def __call__(self, using: str, batch: Sequence[Renewed]) -> list[Hold | str]: ...


def renew_batch(using: str, batch: Sequence[Renewed]) -> list[Hold | str]:
    """Renew every lock of ``batch``: the renewed lock, or why it is lost, for each.

    One lock alone is renewed as ``handle.renew()`` would; more, one statement
    per ttl. A database error loses every lock whose renewal it stopped.
    """
    if len(batch) == 1:
        [handle] = batch
        try:
            outcome = renew_lock(using, handle.resource, handle.owner, handle.ttl)
        except DatabaseError as error:
            return [_database_error(error)]
        return [outcome.value if isinstance(outcome, RenewalFailure) else outcome]
    by_ttl: dict[float, list[Renewed]] = defaultdict(list)
    for handle in batch:
        by_ttl[handle.ttl].append(handle)
    outcomes: dict[Renewed, Hold | str] = {}
    for ttl, handles in by_ttl.items():
        pairs = [(handle.resource, handle.owner) for handle in handles]
        try:
            renewed = service_for(using).renew_held(pairs, ttl)
        except DatabaseError as error:
            for handle in handles:
                outcomes[handle] = _database_error(error)
            continue
        for handle in handles:
            pair = (handle.resource, handle.owner)
            outcome = outcome_of(handle.owner, renewed[pair])
            outcomes[handle] = outcome.value if isinstance(outcome, RenewalFailure) else outcome
    return [outcomes[handle] for handle in batch]


def _database_error(error: DatabaseError) -> str:
    return f"renewing it failed with a database error: {error}"


# The renewer of each alias in this process (its thread runs only while needed).
renewal_thread = PerAlias(lambda using: RenewalThread(using, renew_batch))
