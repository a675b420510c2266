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

if TYPE_CHECKING:
    from django_dlock.locking.handle import LockHandle
    from django_dlock.locking.renewer import Renewer

__all__ = ["Entered", "current_holder", "held_here"]


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

    def forget(self, using: str, resource: str, entered: Entered) -> None:
        with self._lock:
            key = (using, resource, id(entered.holder))
            if self._entries.get(key) is entered:
                del self._entries[key]


held_here = HeldHere()
