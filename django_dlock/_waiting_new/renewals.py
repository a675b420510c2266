"""One renewer thread per process and database alias for every lock held with
``auto_renew=True``.

Each lock wants a renewal every ttl/3. The thread sleeps until the first is
due, then renews every lock that is due (or nearly: within a quarter of its
interval) together, in one statement per ttl, on one connection. The thread
and its connection exist only while some lock is renewed.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from django.db import DatabaseError, connections

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock


class Renewed(Protocol):
    """What the renewer needs of a held lock (``LockHandle``)."""

    resource: str
    owner: str
    ttl: float

    def record_renewal(self, lock: DistributedLock, started: float, ttl: float) -> None: ...

    def mark_lost(self, reason: str) -> None: ...


# A renewal's outcome: the renewed lock, or why the lock is lost (a sentence).
Outcome = "DistributedLock | str"


class RenewalThread:
    """The renewer of one alias: ``add()`` a handle to renew it, ``remove()`` to stop."""

    def __init__(self, using: str, renew: RenewFunction) -> None:
        self.using = using
        self._renew = renew
        self._due: dict[Renewed, float] = {}  # handle -> monotonic time of its next renewal
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, handle: Renewed) -> None:
        with self._condition:
            self._due[handle] = time.monotonic() + handle.ttl / 3
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"django-dlock renewer {self.using}", daemon=True
                )
                self._thread.start()
            self._condition.notify()

    def remove(self, handle: Renewed) -> None:
        """Stop renewing ``handle``; a renewal in flight no longer touches it."""
        with self._condition:
            self._due.pop(handle, None)
            self._condition.notify()

    def renews(self, handle: Renewed) -> bool:
        with self._condition:
            return handle in self._due

    def _run(self) -> None:
        try:
            while (batch := self._next_batch()) is not None:
                started = time.monotonic()
                outcomes = self._renew(self.using, batch)
                with self._condition:
                    for handle, outcome in zip(batch, outcomes, strict=True):
                        if handle not in self._due:
                            continue  # released meanwhile: the outcome is the holder's
                        if isinstance(outcome, str):
                            del self._due[handle]
                            handle.mark_lost(outcome)
                        else:
                            handle.record_renewal(outcome, started, handle.ttl)
        finally:
            connections[self.using].close()

    def _next_batch(self) -> list[Renewed] | None:
        """Wait until some lock is due; ``None`` (and the thread ends) once none is renewed."""
        with self._condition:
            while True:
                if not self._due:
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
                    return batch
                self._condition.wait(first - now)


class RenewFunction(Protocol):
    def __call__(self, using: str, batch: Sequence[Renewed]) -> list[DistributedLock | str]: ...


def renew_batch(using: str, batch: Sequence[Renewed]) -> list[DistributedLock | str]:
    """Renew every lock of ``batch``: the renewed lock, or why it is lost, for each.

    One lock alone is renewed as ``handle.renew()`` would; more, one statement
    per ttl. A database error loses every lock whose renewal it stopped.
    """
    from django_dlock._waiting_new.renew_sql import renew_many, renewal_failures
    from django_dlock.locking.renewal import renew_lock

    if len(batch) == 1:
        [handle] = batch
        try:
            outcome = renew_lock(using, handle.resource, handle.owner, handle.ttl)
        except DatabaseError as error:
            return [f"renewing it failed with a database error: {error}"]
        return [outcome if not hasattr(outcome, "value") else outcome.value]  # type: ignore[list-item]
    by_ttl: dict[float, list[Renewed]] = defaultdict(list)
    for handle in batch:
        by_ttl[handle.ttl].append(handle)
    outcomes: dict[Renewed, DistributedLock | str] = {}
    for ttl, handles in by_ttl.items():
        pairs = [(handle.resource, handle.owner) for handle in handles]
        try:
            renewed = renew_many(using, pairs, ttl)
            failures = renewal_failures(using, [pair for pair in pairs if pair not in renewed])
        except DatabaseError as error:
            for handle in handles:
                outcomes[handle] = f"renewing it failed with a database error: {error}"
            continue
        for handle in handles:
            pair = (handle.resource, handle.owner)
            outcomes[handle] = renewed[pair] if pair in renewed else failures[pair]
    return [outcomes[handle] for handle in batch]


_threads: dict[str, RenewalThread] = {}
_threads_lock = threading.Lock()


def renewal_thread(using: str) -> RenewalThread:
    """The renewer of ``using`` in this process (its thread runs only while needed)."""
    with _threads_lock:
        thread = _threads.get(using)
        if thread is None:
            thread = _threads[using] = RenewalThread(using, renew_batch)
        return thread
