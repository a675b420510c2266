"""A failover-safe Celery beat: ``celery beat -S django_dlock.contrib.celery:LeaderScheduler``.

Run it on several hosts. Each process stands for the lead of ``celery-beat:<app>`` (a
``lock()`` waited for without end and renewed: a leader, docs/kinds.md, labelled
``celery beat on <host>:<pid>``); only the leader ticks the wrapped scheduler (the one
``DLOCK_BEAT_SCHEDULER`` names), and every run it sends is first claimed in the lock
table (``beat_runs``), so that a run is sent at most once also when two processes
believe they lead (one paused past its lease, then resumed). See docs/celery.md.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
import time
from datetime import datetime
from typing import Any
from urllib.parse import quote

from celery.beat import Scheduler
from celery.schedules import schedule as interval
from django.db import DatabaseError, close_old_connections, connections
from django.utils.module_loading import import_string

from django_dlock.conf import conf
from django_dlock.contrib.beat_runs import claim_run, interval_due, latest_due
from django_dlock.exceptions import LockLost
from django_dlock.locking import LockHandle, lock

__all__ = ["DUE_HEADER", "LeaderScheduler", "wrapped_scheduler_class"]

logger = logging.getLogger("django_dlock.beat")

#: The message header that carries the run's due time (ISO 8601, UTC).
DUE_HEADER = "dlock_beat_due"


def wrapped_scheduler_class(path: str | None = None) -> type[Scheduler]:
    """The scheduler class ``DLOCK_BEAT_SCHEDULER`` (or ``path``) names: a dotted path,
    with ``:`` or ``.`` before the class (``"celery.beat:PersistentScheduler"``)."""
    found = import_string((path or conf.BEAT_SCHEDULER).replace(":", "."))
    if not (isinstance(found, type) and issubclass(found, Scheduler)):
        raise TypeError(f"DLOCK_BEAT_SCHEDULER names {found!r}, not a Celery beat Scheduler.")
    return found


class ClaimingScheduler(Scheduler):
    """Put before the wrapped scheduler's class: each run it sends is claimed first.

    Celery's ``tick()`` calls ``reserve(entry)`` (the entry's next state) and then
    ``apply_entry(entry)``, which sends through ``apply_async(entry, advance=False)``.
    """

    # Set by LeaderScheduler on the class it makes.
    dlock_label = ""
    dlock_leadership: Leadership | None = None
    # In a claim: on SQLite its one-statement take holds the write lock outside any
    # atomic block, so beat's SIGTERM handler must not wait there for the release.
    dlock_claiming = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The due time of each reserved run, by entry name, for its apply_async.
        self._dlock_due: dict[str, datetime] = {}
        super().__init__(*args, **kwargs)

    def is_due(self, entry: Any) -> tuple[bool, float]:
        # (Entries are Any: django-celery-beat's ModelEntry, and celery-types types
        # ``reserve`` as returning a heap event.)
        due, next_check = super().is_due(entry)
        if due:
            now = entry.default_now()
            if isinstance(entry.schedule, interval):
                run = interval_due(entry.schedule, entry.last_run_at, now)
                # Look again when the run after this one is due: at once for a
                # leader behind its grid, so that it catches up.
                following = run.timestamp() + float(entry.schedule.seconds)
                next_check = max(following - now.timestamp(), 0.0)
            else:
                run = latest_due(entry.schedule, now)
            self._dlock_due[entry.name] = run
        return due, next_check

    def reserve(self, entry: Any) -> Any:
        due = self._dlock_due.get(entry.name) or latest_due(entry.schedule, entry.default_now())
        reserved: Any = super().reserve(entry)
        self._dlock_due[entry.name] = due
        if isinstance(entry.schedule, interval):
            # On the grid of its period (beat_runs): the next run is due a whole
            # period after this one's due time, not after the moment it was sent.
            zone = getattr(reserved.last_run_at, "tzinfo", None)
            reserved.last_run_at = due.astimezone(zone) if zone else due.replace(tzinfo=None)
        return reserved

    def apply_async(
        self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> Any:
        due = None if advance else self._dlock_due.pop(entry.name, None)
        if due is None:
            due = latest_due(entry.schedule, entry.default_now())
        if not self._dlock_leads(entry.name, due):
            return None
        app_name = self.app.main or "celery"
        self.dlock_claiming = True
        try:
            claimed = claim_run(app_name, entry.name, entry.schedule, due, self.dlock_label)
        finally:
            self.dlock_claiming = False
        if not claimed:
            logger.info(
                "beat: %s due %s was sent already (or is too late to send once); not sending it.",
                entry.name,
                due.isoformat(),
            )
            return None
        if not self._dlock_leads(entry.name, due):
            return None  # claimed, and lost with the lead: at most once
        # The message says which run it is: a worker can tell a run from another.
        sent = copy.copy(entry)
        headers = {**entry.options.get("headers", {}), DUE_HEADER: due.isoformat()}
        sent.options = {**entry.options, "headers": headers}
        return super().apply_async(sent, producer, advance, **kwargs)

    def _dlock_leads(self, name: str, due: datetime) -> bool:
        """Whether this process still leads; a process paused past its lease (then
        resumed) between its tick's look and here, or in the claim, does not."""
        if self.dlock_leadership is None or self.dlock_leadership.leading:
            return True
        logger.warning("beat: no longer the leader; not sending %s due %s.", name, due.isoformat())
        return False


class Leadership:
    """Stands for the lead in a thread of its own, and keeps it, renewed, while it can."""

    def __init__(self, resource: str, label: str, lease: float) -> None:
        self.resource = resource
        self.label = label
        self.lease = lease
        self.error: BaseException | None = None
        self._handle: LockHandle | None = None
        self._became = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._stand, name="dlock-beat-lead", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def leading(self) -> bool:
        """Whether this process leads now: it holds the lease and, by its own clock,
        the lease has not run out since the last renewal (a process resumed after a
        pause stops at once, before its renewer finds the lease gone)."""
        handle = self._handle
        return handle is not None and not handle.lost.is_set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds to lead; whether it leads."""
        if not self._thread.is_alive() and self.error is not None:
            raise RuntimeError("the beat's leadership thread died") from self.error
        if self._became.wait(timeout) and not self.leading:
            # Its lease just ran out by this process's clock: its thread sees it next.
            # A sleep, not a wait on _stopping: beat's SIGTERM handler sets that Event
            # on this thread, and a handler that interrupted a wait on the Event's
            # own lock would block on it for ever.
            time.sleep(0.05)
        return self.leading

    def _stand(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._lead_once()
                except LockLost as lost:
                    logger.warning("beat: %s lost the lead: %s", self.label, lost)
                except DatabaseError as error:  # stand again once the database answers
                    logger.warning("beat: %s cannot reach the lock database: %s", self.label, error)
                    self._stopping.wait(self.lease / 3)
                finally:
                    close_old_connections()
        except BaseException as error:
            self.error = error
            raise

    def _lead_once(self) -> None:
        held = lock(
            self.resource, ttl=self.lease, timeout=float("inf"), auto_renew=True, label=self.label
        )
        try:
            with held as handle:
                self._handle = handle
                self._became.set()
                logger.info("beat: %s leads (term %s).", self.label, handle.fencing_token)
                try:
                    while not handle.lost.wait(0.1) and not self._stopping.is_set():
                        pass
                finally:
                    self._became.clear()
        finally:
            # Only once released: stop() waits for the release while there is a handle
            # (CI: a beat that exited while its release waited for SQLite's write lock
            # kept the lead until the lease ran out).
            self._handle = None

    def stop(self, *, wait: bool = True) -> None:
        """Give the lead up (at once, so that a standby takes over now, not at the
        lease's end), waiting for the release unless ``wait`` is false; a process
        that stands by just stops."""
        self._stopping.set()
        if wait and self._handle is not None:
            self._thread.join(self.lease)


class LeaderScheduler:
    """``celery beat -S django_dlock.contrib.celery:LeaderScheduler``: the scheduler
    that ``DLOCK_BEAT_SCHEDULER`` names, ticked only by the leader of the beat
    processes, each run of it claimed once in the database before it is sent.

    ``lease`` (seconds) is the leader's ttl: a standby takes over at most that long
    (plus a poll) after the leader died or stopped. Subclass to change it.
    """

    lease: float = 10.0
    leadership_class: type[Leadership] = Leadership
    # The longest a standby waits for the lead before it lets beat look around.
    standby_wait = 1.0

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.label = f"celery beat on {socket.gethostname()}:{os.getpid()}"
        self.resource = f"celery-beat:{quote(app.main or 'celery', safe='-_.:')[:200]}"
        self.leadership = self.leadership_class(self.resource, self.label, self.lease)
        self.wrapped = wrapped = wrapped_scheduler_class()
        claiming = type(
            f"Claiming{wrapped.__name__}",
            (ClaimingScheduler, wrapped),
            {"dlock_label": self.label, "dlock_leadership": self.leadership},
        )
        self.scheduler: Scheduler = claiming(app, *args, lazy=lazy, **kwargs)
        self._led = False
        self._closed = False
        if not lazy:
            self.leadership.start()

    def tick(self) -> float:
        """One tick of the wrapped scheduler while this process leads; else wait a
        moment for the lead (0: look again at once). Once closed, ``SystemExit``."""
        self._exit_if_closed()
        if not self.leadership.leading:
            if self._led:
                logger.warning("beat: %s no longer leads; standing by.", self.label)
                self._led = False
            if not self.leadership.wait(min(self.standby_wait, self.max_interval)):
                self._exit_if_closed()
                return 0.0
        if not self._led:
            logger.info("beat: %s leads; sending the schedule's due runs.", self.label)
            self._led = True
        interval = self.scheduler.tick()
        self._exit_if_closed()  # before beat sleeps up to max_interval
        return interval

    def _exit_if_closed(self) -> None:
        """Beat's SIGTERM handler closes the scheduler and raises ``SystemExit``, which
        ends beat's loop. Raised inside a function that Python calls from C and whose
        exception it drops (an object's ``__del__`` that the garbage collector ran,
        Django's SQL functions that SQLite calls in a claim's statement: "user-defined
        function raised exception"), it is lost, and beat would go on ticking, with
        the lead given up, standing by for ever: raise it again."""
        if self._closed:
            logger.warning("beat: %s was closed, and its exit lost; exiting.", self.label)
            raise SystemExit()

    def close(self) -> None:
        """Close the wrapped scheduler and give the lead up. Beat calls it twice on
        SIGTERM: in its signal handler, which may have interrupted this thread in a
        claim (on SQLite the release would wait for the claim's write lock: there it
        only asks for the lead to be given up), and again once the main loop ended,
        which waits for the release. A closed scheduler does not tick again."""
        self._closed = True
        claiming = getattr(self.scheduler, "dlock_claiming", False)
        try:
            self.scheduler.close()
        finally:
            in_database = claiming or connections[conf.DATABASE].in_atomic_block
            self.leadership.stop(wait=not in_database)

    @property
    def info(self) -> str:
        wrapped = self.wrapped
        return (
            f"    . leader election -> {self.resource} (lease {self.lease:g} s)\n"
            f"    . wraps -> {wrapped.__module__}.{wrapped.__qualname__}\n{self.scheduler.info}"
        )

    def __getattr__(self, name: str) -> Any:
        # Celery's Service and remote control use the scheduler's other members
        # (max_interval, should_sync, _do_sync, schedule...): the wrapped one's.
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
