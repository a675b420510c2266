"""``dlock run``: run CMD while holding the lock, in the manner of ``flock(1)``.

The lock is held with ``lock(..., auto_renew=True)``. CMD runs in a process
group of its own (``ProcessGroup``). The loop here sleeps until something
happens: CMD ends, a stop signal comes (forwarded to CMD's group), or the lock
is lost (a renewal found it gone, or its ttl passed without one), which stops
CMD's whole group at once: ``consul lock`` stopped a child 90 s after losing
its lock (consul#9788), and two ran at once meanwhile.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any

from django.core.management.base import CommandError
from django.db import DatabaseError

from django_dlock import signals
from django_dlock.cli.process_group import ProcessGroup
from django_dlock.cli.wake import Wake
from django_dlock.exceptions import LockKindMismatch, LockLost, LockNotAcquired
from django_dlock.kinds import LockKind
from django_dlock.locking import LockHandle, lock

__all__ = ["RunOptions", "run"]

# The signals dlock forwards to CMD's process group (and that stop a wait).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class RunOptions:
    resource: str
    command: list[str]
    wait: float | None  # None: try once; math.inf: wait without end
    ttl: float | None
    kind: LockKind
    label: str
    conflict_exit_code: int
    min_hold: float
    kill_after: float
    lock_delay: float | None = None  # exclusive holds only (lock(..., lock_delay=))


def run(options: RunOptions, say: Callable[[str], None]) -> int:
    """Run ``options.command`` holding the lock; return its exit status.

    Raises ``CommandError`` with ``returncode`` ``conflict_exit_code`` when the
    lock stays held by another owner, 128 + N when signal N stopped the wait,
    127 or 126 when CMD cannot be started, and 1 when the lock was lost (CMD's
    group is stopped first) or the database failed.
    """
    wake = Wake()
    resource = options.resource
    with closing(wake), StopSignals(wake) as stops:
        try:
            with lock(
                resource,
                ttl=options.ttl,
                timeout=options.wait,
                auto_renew=True,
                shared=options.kind.shared,
                limit=options.kind.limit,
                label=options.label,
                lock_delay=options.lock_delay,
            ) as held:
                stops.holding = True
                return _Holder(held, options, wake, stops, say).run()
        except LockNotAcquired as error:
            raise CommandError(str(error), returncode=options.conflict_exit_code) from None
        except Interrupted as stop:
            raise _stopped_waiting(resource, stop.signum) from None
        except LockKindMismatch as error:
            raise CommandError(str(error)) from None
        except LockLost as error:
            # Raised by the release at the end: CMD had ended, maybe not alone.
            raise CommandError(f"{error} The command had run to its end.") from None
        except DatabaseError as error:
            if stops.interrupted is not None:
                # The signal's exception came in the middle of a database call
                # (MariaDB: "Commands out of sync"), and leaving the queue then
                # failed: the stop is what happened. The ticket stops counting
                # as this process's connection closes.
                raise _stopped_waiting(resource, stops.interrupted) from None
            raise CommandError(f"The lock database failed: {error}") from None


def _stopped_waiting(resource: str, signum: int) -> CommandError:
    name = signal.Signals(signum).name
    return CommandError(
        f"Stopped by {name} while waiting for the lock on {resource!r}.",
        returncode=128 + signum,
    )


class _Holder:
    """What ``run`` does while it holds the lock."""

    def __init__(
        self,
        held: LockHandle,
        options: RunOptions,
        wake: Wake,
        stops: StopSignals,
        say: Callable[[str], None],
    ) -> None:
        self.held = held
        self.options = options
        self.wake = wake
        self.stops = stops
        self.say = say
        self.acquired = time.monotonic()
        self.stopped = False  # a stop signal came: no --min-hold

    def run(self) -> int:
        if self.stops.pending:  # a stop signal came as the lock was taken
            return 128 + self.stops.pending[0]
        group = self._start()
        signals.lock_lost.connect(self._on_lost, weak=False)
        try:
            self._supervise(group)
        finally:
            signals.lock_lost.disconnect(self._on_lost)
        status = group.exit_status
        if group.alive():
            # The lock covers the whole group: what CMD left running stops
            # before the lock is released.
            self.say("dlock: the command left processes in its process group; stopping them.")
            group.stop(self.options.kill_after)
        if not self.stopped:
            self._hold_at_least(self.options.min_hold)
        return status

    def _start(self) -> ProcessGroup:
        held, options = self.held, self.options
        env = {
            **os.environ,
            "DLOCK_RESOURCE": held.resource,
            "DLOCK_FENCING_TOKEN": str(held.fencing_token),
            "DLOCK_LABEL": options.label,
        }
        name = options.command[0]
        try:
            return ProcessGroup(options.command, env, self.wake)
        except FileNotFoundError:
            raise CommandError(f"{name}: command not found.", returncode=127) from None
        except OSError as error:
            raise CommandError(f"{name}: {error.strerror}.", returncode=126) from None

    def _supervise(self, group: ProcessGroup) -> None:
        """Until CMD ends: forward stop signals to its group, and stop the group
        as soon as the lock is lost."""
        held = self.held
        while True:
            # Cleared before the looks, not after: a wake that came between a look
            # and the clear would be lost, and the loop would sleep until the lock's
            # deadline (a CMD that ended at once left dlock waiting, renewing).
            self.wake.clear()
            if group.exited.is_set():
                return
            for signum in self.stops.take():
                self.stopped = True
                group.signal(signum)
            if held.lost.is_set():
                reason = held.lost_reason
                group.stop(self.options.kill_after)
                raise CommandError(
                    f"Lost the lock on {held.resource!r} ({reason}): the command was stopped."
                )
            self.wake.wait(self._until_deadline())

    def _hold_at_least(self, seconds: float) -> None:
        """Keep the lock until ``seconds`` after it was taken: a run on a host whose
        clock is behind then finds it held, not free (see the docs' cron recipe).
        A stop signal or the loss of the lock ends it early."""
        end = self.acquired + seconds
        while (left := end - time.monotonic()) > 0:
            self.wake.clear()
            if self.stops.pending or self.held.lost.is_set():
                return
            self.wake.wait(min(left, self._until_deadline()))

    def _until_deadline(self) -> float:
        """Seconds until the lock's local deadline, when it counts as lost unless renewed."""
        return min(max(self.held.deadline - time.monotonic(), 0.0), threading.TIMEOUT_MAX)

    def _on_lost(self, sender: object, *, owner: str, **kwargs: Any) -> None:
        if owner == self.held.owner:
            self.wake.set()


class Interrupted(Exception):
    """A stop signal came while ``run`` waited for the lock."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class StopSignals:
    """SIGTERM, SIGINT and SIGHUP while ``run`` runs (in the main thread only,
    where Python delivers signals). While waiting for the lock they raise
    ``Interrupted`` (the wait leaves its queue on the way out); once ``holding``,
    they are kept in ``pending`` for the loop to forward, and wake it."""

    def __init__(self, wake: Wake) -> None:
        self.wake = wake
        self.holding = False
        self.interrupted: int | None = None  # the signal that stopped the wait
        self.pending: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                # A signal ignored on entry stays ignored, by dlock and by CMD,
                # as a shell leaves it (nohup; SIGINT of a background job).
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for signum, previous in self._previous.items():
            # None: the handler before was not set from Python; the default stands in.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.holding:
            self.interrupted = signum
            raise Interrupted(signum)
        self.pending.append(signum)
        self.wake.set()

    def take(self) -> list[int]:
        """The signals that came since the last call."""
        taken, self.pending = self.pending, []
        return taken
