"""``Wakeup``: how a waiter is woken from another thread, whether it sleeps in a
thread or on an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class Wakeup:
    """A flag that any thread may set, and one waiter sleeps on.

    A sync waiter sleeps with ``wait()``; an async one, created on its event
    loop with ``Wakeup.on_loop()``, with ``await sleep()``: it holds no thread
    while it sleeps. ``clear()`` comes before each look at the database, so a
    wake-up that arrives during the look ends the sleep after it at once.
    ``as_head`` says that the wake-up came from a release naming this waiter
    the head of the queue (it may try to take the lock without looking first).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_event: asyncio.Event | None = None
        self.as_head = False

    @classmethod
    def on_loop(cls) -> Wakeup:
        """A wakeup for a waiter on the running event loop."""
        wakeup = cls()
        wakeup._loop = asyncio.get_running_loop()
        wakeup._async_event = asyncio.Event()
        return wakeup

    @property
    def sleeps_on_loop(self) -> bool:
        """Whether its waiter sleeps on an event loop (``on_loop``)."""
        return self._loop is not None

    def set(self, *, as_head: bool = False) -> None:
        """Wake the waiter (from any thread)."""
        if as_head:
            self.as_head = True
        self._event.set()
        if self._loop is not None and self._async_event is not None:
            # The loop may be closed already (its waiter gone): nothing to wake.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._async_event.set)

    def clear(self) -> bool:
        """Forget earlier wake-ups (in the waiter's own thread or loop); whether
        the last one named the waiter the head."""
        as_head, self.as_head = self.as_head, False
        self._event.clear()
        if self._async_event is not None:
            self._async_event.clear()
        return as_head

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds in this thread; whether it was woken."""
        return self._event.wait(timeout)

    async def sleep(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds on the event loop; whether it was woken."""
        if self._async_event is None:
            raise RuntimeError("Wakeup.sleep() needs a wakeup made by Wakeup.on_loop()")
        try:
            async with asyncio.timeout(timeout):
                await self._async_event.wait()
        except TimeoutError:
            return self._event.is_set()
        return True
