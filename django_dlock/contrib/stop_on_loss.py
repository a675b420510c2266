"""``on_lost="stop"``: stop a task's body once its lock is lost.

A task that goes on after its lock was lost (an operator force-released it, a
renewal found it expired) runs beside the next holder. ``StopOnLoss`` watches
the handle while the body runs and, once the lock is lost, raises the loss in
the body's thread, as Celery's soft time limit raises ``SoftTimeLimitExceeded``
in a prefork child (and ``manage.py dlock run`` stops its command):

- in the main thread (Celery's prefork and solo pools, ``db_worker``): through
  ``SIGUSR1``, whose handler raises. A signal also ends a ``time.sleep()`` or a
  blocking read. Another ``SIGUSR1`` (a soft time limit, Celery's traceback
  dump) goes to the handler that was there before;
- in another thread (Celery's threads pool): as an asynchronous exception,
  raised when the thread next runs Python code; a blocking call that does not
  return keeps it waiting;
- in a green thread (gevent, eventlet): not at all. It logs a warning, and the
  loss is raised when the body returns, as without ``on_lost="stop"``.

The body sees ``LockExpired`` (``LockNotOwned`` when another owner holds the
lock now), with the reason the loss was found. A body that catches it and goes
on is not stopped again.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import signal
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import Any

from django_dlock import signals
from django_dlock.exceptions import LockExpired, LockNotOwned
from django_dlock.locking.handle import LockHandle
from django_dlock.locking.renewal import RenewalFailure

__all__ = ["STOP_SIGNAL", "StopOnLoss", "lost_error"]

logger = logging.getLogger("django_dlock")

STOP_SIGNAL = signal.SIGUSR1


class _AsyncStop(LockExpired):
    """Raised in a thread other than the main one (an asynchronous exception can
    only be a class, so it carries no message: ``StopOnLoss`` replaces it)."""


def lost_error(handle: LockHandle, what: str = "") -> LockExpired | LockNotOwned:
    """The exception that reports ``handle``'s loss with its reason."""
    reason = handle.lost_reason or "it was lost"
    exception = LockNotOwned if reason == RenewalFailure.TAKEN_OVER.value else LockExpired
    return exception(f"The lock on {handle.resource!r} was lost: {reason}{what}.")


class StopOnLoss:
    """While entered, raise the loss of ``handle``'s lock in the entering thread."""

    def __init__(self, handle: LockHandle) -> None:
        self.handle = handle
        self._thread_id = threading.get_ident()
        self._in_main_thread = threading.current_thread() is threading.main_thread()
        self._guard = threading.Lock()
        self._armed = False
        self._stop_sent = False
        self._raised = False
        self._done = False
        self._wake = threading.Event()
        self._previous: Any = None
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> StopOnLoss:
        if _green_threads():
            logger.warning(
                "Cannot stop a task on a lost lock in a green thread (gevent, eventlet): "
                "the loss of the lock on %r will be raised when the task returns.",
                self.handle.resource,
            )
            return self
        if self._in_main_thread:
            self._previous = signal.signal(STOP_SIGNAL, self._on_signal)
        self._armed = True
        signals.lock_lost.connect(self._on_lost, weak=False)
        self._watcher = threading.Thread(
            target=self._watch, name="django-dlock stop on loss", daemon=True
        )
        self._watcher.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._watcher is None:
            return
        with self._guard:
            self._armed = False  # from now on nothing is sent, and the handler raises nothing
        self._done = True
        self._wake.set()
        signals.lock_lost.disconnect(self._on_lost)
        self._watcher.join()
        if self._in_main_thread:
            # signal.signal() runs a pending handler first: the one above, disarmed.
            # (None: the handler before was not set from Python; the default stands in.)
            previous = signal.SIG_DFL if self._previous is None else self._previous
            signal.signal(STOP_SIGNAL, previous)
        if isinstance(exc, _AsyncStop):
            raise lost_error(self.handle, "; the task was stopped") from None

    # -- the watcher thread ---------------------------------------------------------

    def _on_lost(self, sender: Any, resource: str, owner: str, **kwargs: Any) -> None:
        if resource == self.handle.resource and owner == self.handle.owner:
            self._wake.set()

    def _watch(self) -> None:
        """Wait for the loss (announced, or the local deadline passing without a
        renewal), then stop the body; or for the body to end."""
        while not self._done:
            if self.handle.is_lost:
                self._stop()
                return
            left = self.handle.deadline - time.monotonic()
            self._wake.wait(
                min(max(left, 0.0), threading.TIMEOUT_MAX) if math.isfinite(left) else None
            )
            self._wake.clear()

    def _stop(self) -> None:
        with self._guard:
            if not self._armed:
                return
            self._stop_sent = True
            logger.warning(
                "Stopping the task that held the lock on %r: %s",
                self.handle.resource,
                self.handle.lost_reason,
            )
            if self._in_main_thread:
                signal.pthread_kill(self._thread_id, STOP_SIGNAL)
            else:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread_id), ctypes.py_object(_AsyncStop)
                )

    # -- the signal handler, in the main thread ------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if not self._stop_sent:
            _forward(self._previous, signum, frame)
        elif self._armed and not self._raised:
            self._raised = True
            raise lost_error(self.handle, "; the task was stopped")


def _forward(previous: Any, signum: int, frame: FrameType | None) -> None:
    """Do what the handler before ours would have done with a signal not ours."""
    if callable(previous):
        previous(signum, frame)
    elif previous in (signal.SIG_DFL, None):
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _green_threads() -> bool:
    """Whether threads are gevent's or eventlet's greenlets (monkey-patched)."""
    gevent_monkey = sys.modules.get("gevent.monkey")
    if gevent_monkey is not None and gevent_monkey.is_module_patched("threading"):
        return True
    eventlet_patcher = sys.modules.get("eventlet.patcher")
    return eventlet_patcher is not None and bool(eventlet_patcher.is_monkey_patched("thread"))
