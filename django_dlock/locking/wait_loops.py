"""The loops that run a ``Wait`` to its end: in the caller's thread (sync
``lock()``), or on the event loop (``async with lock()``). Both look with
``Wait.step()`` until it gives the lock or the time is up, and end the wait
(``Wait.finish()``) whatever happens."""

from __future__ import annotations

import asyncio
import threading

from django_dlock.locking.waiting import Wait
from django_dlock.locking.waiting_thread import waiting_thread
from django_dlock.rules import Hold

__all__ = ["wait_here", "wait_on_loop"]


def wait_here(wait: Wait) -> Hold:
    """Look until the lock is taken or the time is up, sleeping in this
    thread between looks (a release may wake it early)."""
    try:
        while True:
            outcome = wait.step()
            if not isinstance(outcome, float):
                wait.acquired = True
                return outcome
            if wait.timed_out():
                raise wait.failure()
            wait.pause(min(outcome, threading.TIMEOUT_MAX))
    finally:
        wait.finish()


async def wait_on_loop(wait: Wait) -> Hold:
    """``wait_here()`` on the event loop: it sleeps there, holding no thread
    and no connection; each look runs in the process's waiting thread."""
    thread = waiting_thread(wait.using)
    thread.enter()
    try:
        while True:
            outcome = await thread.run(wait.step)
            if not isinstance(outcome, float):
                wait.acquired = True
                return outcome
            if wait.timed_out():
                raise wait.failure()
            await wait.wakeup.sleep(outcome)
    finally:
        try:
            await asyncio.shield(thread.run(wait.finish))
        finally:
            thread.exit()
