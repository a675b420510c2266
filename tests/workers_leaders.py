"""Worker processes of tests/test_leaders.py: candidates that lead, observers
that report what they see."""

from __future__ import annotations

import time
from typing import Any

from tests.utils import setup_worker


def lead(db: dict[str, Any], resource: str, label: str, ttl: float, stop: Any, events: Any) -> None:
    """Stand for leader of ``resource`` (waiting without end, renewed); once
    leading, put ("leads", label, term, time) on ``events``; lead until
    ``stop`` is set (or the process is killed), then release and put
    ("released", label, term, time), the time taken as the release returned."""
    setup_worker(db)
    from django_dlock import lock

    with lock(resource, timeout=float("inf"), auto_renew=True, ttl=ttl, label=label) as held:
        events.put(("leads", label, held.fencing_token, time.monotonic()))
        stop.wait()
    events.put(("released", label, held.fencing_token, time.monotonic()))


def observe(db: dict[str, Any], resource: str, events: Any, read_only: bool = False) -> None:
    """Put ("sees", label, term, time) on ``events`` for each change that
    ``observe_leader`` yields (label and term None for "no leader"), this
    host's monotonic time as it was yielded. ``read_only``: on a connection
    that may not write."""
    setup_worker(read_only_settings(db) if read_only else db)
    from django.db import DatabaseError

    from django_dlock import observe_leader
    from django_dlock.models import DistributedLock

    if read_only:
        try:
            DistributedLock.objects.filter(resource=resource).update(label="written")
        except DatabaseError:
            pass  # as it should
        else:
            raise AssertionError("the observer's connection may write")

    for leader in observe_leader(resource):
        if leader is None:
            events.put(("sees", None, None, time.monotonic()))
        else:
            events.put(("sees", leader.label, leader.term, time.monotonic()))


def read_only_settings(db: dict[str, Any]) -> dict[str, Any]:
    """``db`` on a connection where every write fails: PostgreSQL's read-only
    transactions, MariaDB's read-only session, SQLite's file opened read-only."""
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    from django.conf import settings

    engine = settings.DATABASES["default"]["ENGINE"]
    options = dict(settings.DATABASES["default"].get("OPTIONS", {}))
    if engine.endswith("postgresql"):
        options["options"] = "-c default_transaction_read_only=on"
        return {**db, "OPTIONS": options}
    if engine.endswith("mysql"):
        options["init_command"] = "SET SESSION TRANSACTION READ ONLY"
        return {**db, "OPTIONS": options}
    options.pop("transaction_mode", None)
    return {**db, "NAME": f"file:{db['NAME']}?mode=ro", "OPTIONS": {**options, "uri": True}}
