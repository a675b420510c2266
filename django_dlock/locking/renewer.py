"""``Renewer``: the background thread of ``lock(..., auto_renew=True)``."""

from __future__ import annotations

import threading
import time

from django.db import DatabaseError, connections

from django_dlock.locking.handle import LockHandle
from django_dlock.locking.renewal import RenewalFailure, renew_lock
from django_dlock.models import DistributedLock


class Renewer(threading.Thread):
    """Renews ``handle``'s lock every ``interval`` seconds until stopped or lost.

    The thread has its own database connection, closed when it ends. Any
    failed renewal — expired, taken over, released, purged, or a database error
    — marks the handle lost and ends the thread: past that point the holder
    cannot know that it still holds the lock.
    """

    def __init__(self, handle: LockHandle) -> None:
        super().__init__(name=f"django-dlock renewer {handle.resource}", daemon=True)
        self.handle = handle
        self.interval = handle.ttl / 3
        self.stopped = threading.Event()

    def run(self) -> None:
        handle = self.handle
        try:
            while not self.stopped.wait(self.interval):
                started = time.monotonic()
                outcome: DistributedLock | RenewalFailure | str
                try:
                    outcome = renew_lock(handle.using, handle.resource, handle.owner, handle.ttl)
                except DatabaseError as error:
                    outcome = f"renewing it failed with a database error: {error}"
                if self.stopped.is_set():
                    return  # the holder released it meanwhile; its outcome is the holder's
                if isinstance(outcome, RenewalFailure):
                    outcome = outcome.value
                if isinstance(outcome, str):
                    handle.mark_lost(outcome)
                    return
                handle.record_renewal(outcome, started, handle.ttl)
        finally:
            connections[handle.using].close()

    def stop(self) -> None:
        self.stopped.set()
        if self is not threading.current_thread():
            self.join()
