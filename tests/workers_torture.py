"""Worker processes of the tests of library bugs the torture run found
(``tests/test_torture_findings.py``; tests.utils.run_in_processes)."""

from __future__ import annotations

import os
import random
import time
from typing import Any

from tests.utils import setup_worker


def purge_or_take_all(db: dict[str, Any], purging: bool, seconds: float, start: Any) -> list[str]:
    """For ``seconds``: purge expired locks, or take three of four locks at once
    (in any order, each lock expiring at once, so that the purges find them);
    the database errors raised, as text."""
    setup_worker(db)
    from django.db import DatabaseError

    from django_dlock.models import DistributedLock

    names = ["found:a", "found:b", "found:c", "found:d"]
    rng = random.Random()
    errors: list[str] = []
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end and not errors:
        try:
            if purging:
                DistributedLock.objects.purge_expired()
            else:
                rng.shuffle(names)
                DistributedLock.objects.acquire_all(names[:3], ttl=0.002)
        except DatabaseError as error:
            call = "purge_expired" if purging else "acquire_all"
            errors.append(f"{call}: {type(error).__name__}: {str(error).splitlines()[0]}")
    return errors


def reenter_or_read(
    db: dict[str, Any], reader: bool, seconds: float, start: Any, found: Any
) -> list[str]:
    """For ``seconds``: enter ``lock(reentrant=True)`` (exclusive) and look at
    the hold count ``holders()`` shows, or read beside the others
    (``lock(shared=True)``); what went wrong, as text. All stop once one
    process finds something (``found``, an event)."""
    setup_worker(db)
    from django_dlock import LockExpired, LockNotAcquired, LockNotOwned, lock
    from django_dlock.models import DistributedLock

    rng = random.Random()
    wrong: list[str] = []
    start.wait()
    end = time.monotonic() + seconds
    while time.monotonic() < end and not found.is_set():
        try:
            with lock("found:x", reentrant=not reader, shared=reader, timeout=3, ttl=2) as held:
                if not reader:
                    counts = [
                        hold.hold_count
                        for hold in DistributedLock.objects.holders("found:x")
                        if hold.owner == held.owner
                    ]
                    if counts != [1]:
                        wrong.append(f"one entry of lock(reentrant=True) holds {counts}")
                time.sleep(rng.uniform(0, 0.003))
        except (LockExpired, LockNotOwned) as error:
            wrong.append(f"{type(error).__name__} at the exit: {error}")
        except LockNotAcquired:
            pass  # behind a hold left over by one of the above
        if wrong:
            found.set()
    return wrong


def read_or_purge(
    db: dict[str, Any], purging: bool, seconds: float, start: Any
) -> list[tuple[int, str]]:
    """For ``seconds``: take a reader's hold of one resource and release it at
    once, or purge expired locks; the (token, owner) of every hold taken."""
    setup_worker(db)
    from django_dlock.models import DistributedLock

    manager = DistributedLock.objects
    taken: list[tuple[int, str]] = []
    start.wait()
    end = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < end:
        turn += 1
        if purging:
            manager.purge_expired()
            continue
        owner = f"{os.getpid()}.{turn}"
        hold = manager.acquire("found:read", owner=owner, ttl=1, shared=True)
        if hold is not None:
            taken.append((hold.fencing_token, owner))
            manager.release("found:read", owner)
    return taken


def wait_as_writer(db: dict[str, Any], resource: str, timeout: float) -> dict[str, Any]:
    """``lock(resource, timeout=timeout)`` as the writer: its token and how
    long the call took, or that it raised ``LockNotAcquired``."""
    setup_worker(db)
    from django_dlock import LockNotAcquired, lock

    began = time.monotonic()
    try:
        with lock(resource, owner="writer", ttl=30, timeout=timeout) as held:
            return {"token": held.fencing_token, "seconds": time.monotonic() - began}
    except LockNotAcquired:
        return {"refused": True, "seconds": time.monotonic() - began}
