"""This process's blocking waiters, per database alias and resource, in ticket
order: only the first of each looks at the database, the others sleep until it
leaves, so that a thousand waiters of one process cost what one does."""

from __future__ import annotations

import bisect
import threading
from typing import Protocol

from django_dlock.locking.wakeup import Wakeup

__all__ = ["LocalQueues", "Queued", "local_queues"]


class Queued(Protocol):
    """What the local queues need of a waiter (``Wait``)."""

    @property
    def using(self) -> str: ...

    @property
    def resource(self) -> str: ...

    ticket: int | None
    ticket_until: float  # monotonic time until which its ticket counts
    wakeup: Wakeup

    def refresh_in(self) -> float:
        """Seconds until its ticket needs refreshing."""
        ...


class LocalQueues:
    """This process's waiters per (alias, resource), in ticket order. Only the
    first of each looks at the database; the others sleep until it leaves."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], list[tuple[int, int, Queued]]] = {}

    def join(self, wait: Queued) -> None:
        assert wait.ticket is not None  # noqa: S101 - called right after queuing
        with self._lock:
            queue = self._queues.setdefault((wait.using, wait.resource), [])
            bisect.insort(queue, (wait.ticket, id(wait), wait))

    def busy(self, wait: Queued) -> bool:
        """Whether other waiters of this process are queued for ``wait``'s resource."""
        with self._lock:
            return bool(self._queues.get((wait.using, wait.resource)))

    def first(self, wait: Queued) -> bool:
        with self._lock:
            queue = self._queues.get((wait.using, wait.resource))
            return not queue or queue[0][2] is wait

    def tickets(self, wait: Queued) -> list[int]:
        with self._lock:
            return [ticket for ticket, _, _ in self._queues.get((wait.using, wait.resource), [])]

    def refresh_in(self, wait: Queued) -> float:
        """Seconds until a ticket of this process for ``wait``'s resource needs refreshing."""
        with self._lock:
            queue = self._queues.get((wait.using, wait.resource)) or [(0, 0, wait)]
            return min(waiting.refresh_in() for _, _, waiting in queue)

    def refreshed(self, wait: Queued, until: float) -> None:
        with self._lock:
            for _, _, waiting in self._queues.get((wait.using, wait.resource), []):
                waiting.ticket_until = max(waiting.ticket_until, until)

    def leave(self, wait: Queued) -> None:
        key = (wait.using, wait.resource)
        with self._lock:
            queue = self._queues.get(key, [])
            was_first = bool(queue) and queue[0][2] is wait
            queue[:] = [entry for entry in queue if entry[2] is not wait]
            if not queue:
                self._queues.pop(key, None)
            elif was_first:
                queue[0][2].wakeup.set()  # the next one looks from now on


local_queues = LocalQueues()
