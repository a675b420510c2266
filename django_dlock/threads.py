"""The threads that async code runs lock operations in.

A lock operation must never share the request's connection, nor a transaction
open on it, so async code runs it in a thread of django-dlock's own (not the
request's thread-sensitive one), with that thread's own connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

_T = TypeVar("_T")


_Acquired = TypeVar("_Acquired")

_lock_threads: ThreadPoolExecutor | None = None


async def run_in_lock_thread(using: str, function: Callable[..., _T], *args: Any) -> _T:
    """Run ``function(*args)`` in a django-dlock worker thread, with that
    thread's own connection to ``using``, which is checked before and after the
    call and closed or kept as CONN_MAX_AGE says (as Django does at the start
    and end of a request: an idle thread's connection may have grown too old)."""
    global _lock_threads
    if _lock_threads is None:
        _lock_threads = ThreadPoolExecutor(thread_name_prefix="django-dlock")
    call = with_checked_connection(using, function, *args)
    return await sync_to_async(call, thread_sensitive=False, executor=_lock_threads)()


def with_checked_connection(
    using: str, function: Callable[..., _T], *args: Any
) -> Callable[[], _T]:
    """``function(*args)`` as a call for a worker thread of django-dlock's: the
    thread's connection to ``using`` is checked before and after it and closed
    or kept as CONN_MAX_AGE says (as Django does around a request)."""

    def call() -> _T:
        connections[using].close_if_unusable_or_obsolete()
        try:
            return function(*args)
        finally:
            connections[using].close_if_unusable_or_obsolete()

    return call


async def release_if_cancelled(
    using: str,
    acquiring: Awaitable[_Acquired],
    release: Callable[[], object],
    stop: Callable[[], object] | None = None,
) -> _Acquired:
    """Await ``acquiring``, an acquisition on ``using`` running in a thread.

    Cancelling the awaiting task cannot stop a thread: it would take the lock
    anyway, for an owner nobody knows, until its ttl. So on cancellation
    ``stop()`` asks the thread to give up early, the lock it took (if any) is
    released with ``release()`` once it finishes, and then the cancellation
    goes on.
    """
    task = asyncio.ensure_future(acquiring)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if stop is not None:
            stop()
        # Shielded too: a second cancellation must not skip the release.
        await asyncio.shield(_release_when_done(using, task, release))
        raise


async def _release_when_done(
    using: str, task: asyncio.Future[_Acquired], release: Callable[[], object]
) -> None:
    await asyncio.wait([task])
    if task.cancelled() or task.exception() is not None:
        return  # it took nothing (e.g. a waiter that gave up)
    if task.result() is not None:
        await run_in_lock_thread(using, release)
