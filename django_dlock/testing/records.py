"""What the lock operations did during a block, from the project's signals:
for asserting that a call ran under a lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django_dlock import signals


@dataclass(frozen=True)
class LockEvent:
    """One signal: ``kind`` is ``"acquired"``, ``"renewed"`` (also a reentrant
    re-acquire) or ``"released"``; ``thread`` the name of the thread that sent it."""

    kind: str
    resource: str
    fencing_token: int
    mode: str
    thread: str


@dataclass
class LockRecorder:
    """The lock events of the block it records (``record_locks()``), in order,
    from every thread of this process (other processes send their own signals)."""

    events: list[LockEvent] = field(default_factory=list)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def acquired(self) -> list[str]:
        """The resources acquired, in order, once per acquisition."""
        return [event.resource for event in self.events if event.kind == "acquired"]

    def released(self) -> list[str]:
        """The resources released, in order."""
        return [event.resource for event in self.events if event.kind == "released"]

    def _add(self, kind: str, lock: Any) -> None:
        event = LockEvent(
            kind, lock.resource, lock.fencing_token, lock.mode, threading.current_thread().name
        )
        with self._guard:
            self.events.append(event)

    def _on_acquired(self, sender: Any, lock: Any, **kwargs: Any) -> None:
        self._add("acquired", lock)

    def _on_renewed(self, sender: Any, lock: Any, **kwargs: Any) -> None:
        self._add("renewed", lock)

    def _on_released(self, sender: Any, lock: Any, **kwargs: Any) -> None:
        self._add("released", lock)


_CONNECTED = (
    (signals.lock_acquired, "_on_acquired"),
    (signals.lock_renewed, "_on_renewed"),
    (signals.lock_released, "_on_released"),
)


@contextmanager
def record_locks() -> Iterator[LockRecorder]:
    """Record the lock events sent while the block runs."""
    recorder = LockRecorder()
    uid = f"django_dlock.testing.{id(recorder)}"
    for signal, method in _CONNECTED:
        signal.connect(getattr(recorder, method), weak=False, dispatch_uid=uid)
    try:
        yield recorder
    finally:
        for signal, _method in _CONNECTED:
            signal.disconnect(dispatch_uid=uid)


@contextmanager
def assert_ran_under_lock(resource: str, *, released: bool = True) -> Iterator[LockRecorder]:
    """Fail unless the block acquired ``resource`` (a new hold: ``lock()``,
    ``acquire()``, a task's lock) and, with ``released`` (default), released it
    again before the block ended. The failure names the locks the block did take."""
    with record_locks() as recorder:
        yield recorder
    if resource not in recorder.acquired():
        taken = sorted(set(recorder.acquired())) or "none"
        raise AssertionError(
            f"The block did not run under the lock {resource!r}; it took: {taken}."
        )
    if released and resource not in recorder.released():
        raise AssertionError(
            f"The block acquired {resource!r} and left it held (released=False allows that)."
        )


@contextmanager
def assert_not_locked(resource: str) -> Iterator[LockRecorder]:
    """Fail if the block acquired ``resource`` (say, after the kit held it elsewhere)."""
    with record_locks() as recorder:
        yield recorder
    if resource in recorder.acquired():
        raise AssertionError(f"The block acquired {resource!r}.")
