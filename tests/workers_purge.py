"""Functions that run in worker processes while purges run (tests.utils.run_in_processes)."""

from __future__ import annotations

import io
import re
import time
from typing import Any

from tests.utils import setup_worker

TTL = 5  # seconds: short, yet far longer than a round takes even on a busy machine
# Renewers pause between rounds as real ones do: SQLite hands its write lock to
# whoever asks first, not to whoever waited longest, so tight loops starve the others.
PAUSE = 0.02


def hold_renew_and_reacquire(
    db: dict[str, Any], name: str, min_rounds: int, start: Any, purged: Any, done: Any
) -> dict[str, Any]:
    """Hold a few locks and keep them, for at least ``min_rounds`` rounds and until
    the event ``purged`` is set: each round renews every one of them,
    releases one and acquires it again at once, and takes a "flash" lock that
    expires almost at once (for the purges to delete). Fails on the first renew
    or acquire that does not succeed, or a fencing token that does not grow."""
    setup_worker(db)
    from django_dlock.models import DistributedLock

    locks = DistributedLock.objects
    owner = f"holder-{name}"
    held = [f"{name}:held-{n}" for n in range(4)]
    tokens: dict[str, int] = {}
    start.wait()
    try:
        for resource in held:
            lock = locks.acquire(resource, owner=owner, ttl=TTL)
            assert lock is not None, f"first acquire of {resource} failed"
            tokens[resource] = lock.fencing_token
        renewed = reacquired = n = 0
        while n < min_rounds or not purged.is_set():
            for resource in held:
                renewal = locks.renew(resource, owner=owner, ttl=TTL)  # DoesNotExist if purged
                assert renewal is not None, f"round {n}: renew of {resource} returned None"
                assert renewal.fencing_token == tokens[resource]
                renewed += 1
            resource = held[n % len(held)]
            assert locks.release(resource, owner=owner).value == "released"
            lock = locks.acquire(resource, owner=owner, ttl=TTL)
            assert lock is not None, f"round {n}: re-acquire of {resource} failed"
            assert lock.fencing_token > tokens[resource], "fencing token did not grow"
            tokens[resource] = lock.fencing_token
            reacquired += 1
            flash = f"{name}:flash-{n % 5}"
            lock = locks.acquire(flash, owner=owner, ttl=0.001)
            assert lock is not None, f"round {n}: acquire of expired {flash} failed"
            assert lock.fencing_token > tokens.get(flash, 0), "fencing token did not grow"
            tokens[flash] = lock.fencing_token
            n += 1
            time.sleep(PAUSE)
        return {"rounds": n, "renewed": renewed, "reacquired": reacquired}
    finally:
        done.set()


def purge_until(
    db: dict[str, Any], start: Any, min_runs: int, purged: Any, done: list[Any]
) -> dict[str, int]:
    """Run ``manage.py purge_locks --batch-size 3`` over and over; set ``purged``
    after ``min_runs`` runs, stop when every event in ``done`` is set; return how
    many runs and deleted locks."""
    setup_worker(db)
    from django.core.management import call_command

    start.wait()
    runs = deleted = 0
    while not all(event.is_set() for event in done):
        out = io.StringIO()
        call_command("purge_locks", "--batch-size", "3", stdout=out)
        match = re.fullmatch(r"Deleted (\d+) lock\(s\)\n", out.getvalue())
        assert match, out.getvalue()
        deleted += int(match[1])
        runs += 1
        if runs >= min_runs:
            purged.set()
        time.sleep(PAUSE)
    return {"runs": runs, "deleted": deleted}


def dispatch(kind: str, *args: Any) -> Any:
    """One entry point for both kinds of worker, so that one call starts them all."""
    if kind == "hold":
        return hold_renew_and_reacquire(*args)
    return purge_until(*args)
