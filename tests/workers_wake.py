"""Functions that run in worker processes of tests/test_mysql_wake.py."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def take_turns_when_told(db: dict[str, Any], prefix: str, rounds: int, go: Any, got: Any) -> None:
    """For each round, once told (``go``), wait in ``lock()`` for
    ``{prefix}:{round}`` and put the monotonic time it got it (``got``)."""
    setup_worker(db)
    from django_dlock import lock

    for number in range(rounds):
        go.get(timeout=60)
        with lock(f"{prefix}:{number}", ttl=30, timeout=30):
            got.put(time.monotonic())


def wait_once(db: dict[str, Any], resource: str, got: Any) -> None:
    """Wait in ``lock()`` for ``resource`` (ttl 45, timeout 60); put the
    monotonic time it got it."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, ttl=45, timeout=60):
        got.put(time.monotonic())


def wait_counting_polls(db: dict[str, Any], resource: str, first: str, got: Any) -> None:
    """Wait in ``lock()`` for ``resource`` (ttl 45, timeout 60), counting its
    polls: the looks that saw the lock free or held by another owner than
    ``first`` (its holder as the wait began). Put the monotonic time it got
    it and that count. ``DLOCK_BACKOFF_MAX`` 5 s: a waiter at a gate does
    not look on a timer within the test."""
    setup_worker(db)
    from django.conf import settings

    from django_dlock import lock
    from django_dlock.conf import conf
    from django_dlock.locking.queue import Queue, QueueState

    settings.DLOCK_BACKOFF_MAX = 5.0
    conf.forget()
    polls = []
    look = Queue.look

    def counted(self: Queue, *args: Any) -> QueueState:
        state = look(self, *args)
        if state.holder != first:
            polls.append(state)
        return state

    Queue.look = counted  # type: ignore[method-assign,assignment]
    with lock(resource, ttl=45, timeout=60):
        got.put((time.monotonic(), len(polls)))
