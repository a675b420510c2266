"""The history of a torture run: JSON lines, one per call or observation.

Every process appends to a file of its own with one ``os.write`` per line, so a
line written before a SIGKILL is kept, and a process killed mid-write leaves at
most one torn last line (which ``load`` skips). Times ``t``, ``t0``, ``t1`` are
``time.monotonic()``, which every process of one host shares; database times
(``acquired_at``, ``expires_at``, ``now``) are ISO strings from the database's
clock.

Events (``op``):
- ``acquire``, ``renew``, ``release``, ``force_release``, ``purge``, ``lock``:
  one call, with ``resource``, ``owner``, ``ttl``, ``t0``/``t1`` and either an
  outcome (``lock``: the hold's fields or null; ``result``; ``released``;
  ``deleted``) or ``error`` (class, message, ``db``: a database error). An
  acquisition also says what it asked for: ``shared``, ``limit``,
  ``reentrant``, ``leader`` (a ``lock()`` waiting without end, auto-renewed)
  and, for a re-entry of ``lock(reentrant=True)``, its ``depth``.
- ``acquire_all``, ``lock_all`` (``lock([...])``), ``release_all``,
  ``unlock_all``: several resources in one call, with ``resources``,
  ``modes`` and ``locks`` (a list, or null when none was taken) or
  ``results``; ``set`` names the call.
- ``upgrade``, ``downgrade``: a ``lock()`` handle's change of mode (a new
  grant: ``lock`` has the new token), or ``error``.
- ``queued``: a waiter's ticket entered the queue (``mode``, ``t``: once the
  INSERT committed). A waiter with a ``priority`` (``lock(priority=N)``, also
  on its ``lock`` event) adds the database's clock read before the INSERT
  (``db0``) and after its commit (``db1``).
- ``lock`` with ``until`` "commit": held until the transaction around it
  ended; its ``unlock`` spans that end (``rolled_back``).
- ``holders``: what ``holders()`` showed (``holds``: owner, token, hold count
  and mode of each), read inside a section (``cs``) or after an
  all-or-nothing call that took nothing (``set``).
- ``cs_enter``, ``cs_write``, ``cs_read``, ``cs_told``, ``cs_exit``,
  ``unlock``: a critical section (``kind``: exclusive, shared, permit or
  leader), its guarded-store writes (a writer's) and reads (a reader's), the
  moments its holder was told that the lock was lost, its end and (for
  ``lock()``) the release on leaving it.
- ``fault``, ``killed``, ``snapshot``, ``store_final``: written by the runner;
  a worker writes the ``fault`` (and ``killed``) of its own strikes as the
  head of a queue (``head_faults.py``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

Event = dict[str, Any]


def lock_fields(lock: Any) -> dict[str, Any] | None:
    """A hold's fields as the history keeps them (``lock`` is a
    ``DistributedLock``, or a ``LockHold`` of a reader or a permit)."""
    if lock is None:
        return None
    return {
        "owner": lock.owner,
        "token": lock.fencing_token,
        "acquired_at": iso(lock.acquired_at),
        "expires_at": iso(lock.expires_at),
        "mode": lock.mode,
        "hold_count": lock.hold_count,
    }


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def error_fields(error: BaseException) -> dict[str, Any]:
    """An exception as the history keeps it; ``db`` tells a database failure."""
    from django.db import DatabaseError

    db_error = isinstance(error, DatabaseError | sqlite3.Error)
    try:
        import psycopg

        db_error = db_error or isinstance(error, psycopg.Error)
    except ImportError:  # SQLite-only runs need no driver
        pass
    return {
        "class": type(error).__name__,
        "message": str(error)[:300],
        "db": db_error,
    }


class Recorder:
    """Appends the events of one process to its history file."""

    def __init__(self, path: Path | str, process: str) -> None:
        self.process = process
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def write(self, op: str, **fields: Any) -> Event:
        event: Event = {"p": self.process, "op": op, **fields}
        os.write(self._fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())
        return event

    def close(self) -> None:
        os.close(self._fd)


def now() -> float:
    return time.monotonic()


_NEVER = threading.Event()


def pause(seconds: float) -> None:
    """Sleep. (``time.sleep`` fails with EINVAL under libfaketime when the
    monotonic clock is left alone, as the clock-skew processes have it.)"""
    _NEVER.wait(seconds)


def read_events(path: Path) -> Iterator[Event]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the torn last line of a process killed mid-write
            if isinstance(event, dict):
                yield event


def load(paths: Iterable[Path]) -> list[Event]:
    """The events of every history file, in file order."""
    return [event for path in paths for event in read_events(path)]
