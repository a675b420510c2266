"""The thread that does the database work of this process's async waiters.

An async waiter sleeps on the event loop, holding no thread and no connection;
each look at the database runs in this one thread per alias, on its one
connection. The thread and its connection exist while some async waiter does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import DatabaseError, connections

from django_dlock.per_alias import PerAlias

_T = TypeVar("_T")


class WaitingThread:
    """``enter()`` before a wait, ``run()`` each step of it, ``exit()`` after."""

    def __init__(self, using: str) -> None:
        self.using = using
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._waiters = 0

    def enter(self) -> None:
        with self._lock:
            self._waiters += 1
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=f"django-dlock waiting {self.using}"
                )

    def exit(self) -> None:
        with self._lock:
            self._waiters -= 1
            if self._waiters or self._executor is None:
                return
            executor, self._executor = self._executor, None
        # The last waiter is gone: close the connection, and the thread ends.
        executor.submit(self._close)
        executor.shutdown(wait=False)

    def _close(self) -> None:
        connections[self.using].close()  # looked up in the thread: its own connection

    async def run(self, function: Callable[..., _T], *args: Any) -> _T:
        """``function(*args)`` in the thread, on its connection (kept between calls)."""
        with self._lock:
            executor = self._executor
        if executor is None:
            raise RuntimeError("WaitingThread.run() outside enter() and exit()")
        return await asyncio.wrap_future(executor.submit(self._call, function, *args))

    def _call(self, function: Callable[..., _T], *args: Any) -> _T:
        try:
            return function(*args)
        except DatabaseError:
            # A broken connection is replaced on the next call, not reused.
            connections[self.using].close_if_unusable_or_obsolete()
            raise


# The waiting thread of each alias in this process.
waiting_thread = PerAlias(WaitingThread)
