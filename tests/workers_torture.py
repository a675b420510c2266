"""Worker processes of the tests of library bugs the torture run found
(``tests/test_torture_findings.py``; tests.utils.run_in_processes)."""

from __future__ import annotations

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
