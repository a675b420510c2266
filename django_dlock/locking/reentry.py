"""The ``lock()`` holds of this process, per thread or asyncio task: so that a
reentrant ``lock()`` nested in its holder re-enters without waiting, and a
``lock()`` that is not reentrant, nested in its holder, fails at once rather
than wait for itself until its timeout.

The holder is the running asyncio task when there is one (a child task is
another holder than its parent, as a task that awaits is not its own caller),
and else the thread. Keyed by reference, never by an id that could come round
again: an entry keeps its holder alive until it is forgotten.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django_dlock.exceptions import LockHeldByCaller

if TYPE_CHECKING:
    from django_dlock.kinds import LockKind
    from django_dlock.locking.handle import LockHandle
    from django_dlock.locking.renewer import Renewer

__all__ = ["Entered", "check_reentry", "current_holder", "held_here"]


def current_holder() -> object:
    """The asyncio task running now, or else the thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop
        task = None
    return task if task is not None else threading.current_thread()


@dataclass
class Entered:
    """One hold entered by a holder: how deep, and what it holds."""

    holder: object
    handle: LockHandle
    renewer: Renewer | None
    reentrant: bool
    depth: int = 1


class HeldHere:
    """This process's entered holds, by (alias, resource, holder)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, int], Entered] = {}

    def get(self, using: str, resource: str, holder: object) -> Entered | None:
        with self._lock:
            return self._entries.get((using, resource, id(holder)))

    def add(self, using: str, resource: str, entered: Entered) -> None:
        with self._lock:
            self._entries[(using, resource, id(entered.holder))] = entered

    def held_by(self, using: str, holder: object) -> list[tuple[str, str]]:
        """The (resource, owner) of every hold ``holder`` has entered on ``using``."""
        with self._lock:
            return [
                (resource, entered.handle.owner)
                for (alias, resource, key), entered in self._entries.items()
                if alias == using and key == id(holder)
            ]

    def leave(self, using: str, resource: str, entered: Entered) -> None:
        """One entry of ``entered`` ends: the holder no longer holds it once the last does."""
        entered.depth -= 1
        if entered.depth == 0:
            self.forget(using, resource, entered)

    def forget(self, using: str, resource: str, entered: Entered) -> None:
        with self._lock:
            key = (using, resource, id(entered.holder))
            if self._entries.get(key) is entered:
                del self._entries[key]


held_here = HeldHere()


def check_reentry(entered: Entered, resource: str, *, reentrant: bool, kind: LockKind) -> None:
    """Refuse a ``lock()`` of ``resource`` (``reentrant``, of ``kind``) that would
    enter ``entered``, a hold its own thread or task holds, unless both are
    reentrant and of one kind."""
    if not (reentrant and entered.reentrant):
        raise LockHeldByCaller(
            f"The lock on {resource!r} is held by this "
            f"{'task' if isinstance(entered.holder, asyncio.Task) else 'thread'} already: "
            "a nested lock() would wait for itself. Pass reentrant=True to both to "
            "enter it again."
        )
    handle = entered.handle
    if (handle.mode, handle.limit) != (kind.mode, kind.limit):
        raise ValueError(
            f"A reentrant lock() on {resource!r} re-enters the kind it holds "
            f"({handle.mode}); use the handle's upgrade() or downgrade() to change it."
        )
