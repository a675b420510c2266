"""The Celery app of tests/test_contrib_beat.py: ``celery -A tests.workers_beat beat
-S tests.workers_beat:FastLeader``.

Its two entries are due every second. Nothing consumes their messages: the task's
``apply_async`` records each send (entry, due time, pid) in the Redis list ``sends``
of CELERY_BROKER_URL instead. The test database's name is in DLOCK_TEST_DB_NAME. With
DLOCK_BEAT_WAIT_IN_SQL, a beat waits in a Python function that SQLite calls (WAIT_IN_SQL).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from datetime import timedelta
from typing import Any

import django
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
if os.environ.get("DLOCK_TEST_DB_NAME"):
    settings.DATABASES["default"]["NAME"] = os.environ["DLOCK_TEST_DB_NAME"]
django.setup()

import redis  # noqa: E402
from celery import Celery, Task  # noqa: E402
from django.db.backends.signals import connection_created  # noqa: E402
from django.db.backends.sqlite3._functions import (  # type: ignore[import-untyped]  # noqa: E402
    _sqlite_format_dtdelta,
)

from django_dlock.contrib.beat import DUE_HEADER, Leadership  # noqa: E402
from django_dlock.contrib.celery import LeaderScheduler  # noqa: E402

BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
# The leader's lease in these tests (seconds): the failover window follows from it.
LEASE = 2.0
# Where a beat waits a minute in an SQL function: "claim" (SQLite) or "send", or nowhere.
WAIT_IN_SQL = os.environ.get("DLOCK_BEAT_WAIT_IN_SQL", "")

app = Celery("dlock-beat-tests", broker=BROKER_URL)
app.conf.update(
    broker_connection_retry_on_startup=True,
    beat_schedule={
        "every second": {"task": "tests.beat_tick", "schedule": 1.0, "args": ["every second"]},
        "each-second": {
            "task": "tests.beat_tick",
            "schedule": timedelta(seconds=1),
            "args": ["each-second"],
        },
    },
)


class FastLeader(LeaderScheduler):
    lease = LEASE


class Unelected(Leadership):
    """Every process leads: only the claims keep a run from being sent twice."""

    @property
    def leading(self) -> bool:
        return True

    def start(self) -> None:
        pass


class EveryoneLeads(FastLeader):
    leadership_class = Unelected


class Recording(Task):  # type: ignore[type-arg]
    """Records the send instead of sending."""

    def apply_async(self, args: Any = None, kwargs: Any = None, *more: Any, **options: Any) -> Any:
        send = {
            "entry": args[0],
            "due": options["headers"][DUE_HEADER],
            "at": time.time(),
            "pid": os.getpid(),
        }
        redis.Redis.from_url(BROKER_URL).rpush("sends", json.dumps(send))
        if WAIT_IN_SQL == "send":
            wait_in_sql()


def wait_in_sql() -> None:
    """Wait a minute in a function that SQLite calls, as Django's SQL functions are in
    a claim's statement: a signal handler that raises there raises into SQLite."""
    database = sqlite3.connect(":memory:")
    database.create_function("wait_a_minute", 0, wait_a_minute)
    database.execute("SELECT wait_a_minute()")


def wait_a_minute() -> None:
    logging.getLogger(__name__).info("beat: waiting in an SQL function.")
    time.sleep(60)


def wait_in_the_first_claim(connection: Any, **kwargs: Any) -> None:
    """On SQLite, the main thread's first claim waits a minute in the statement that
    takes it, in Django's SQL function ``django_format_dtdelta``."""
    if connection.vendor != "sqlite" or threading.current_thread() is not threading.main_thread():
        return

    def format_dtdelta(*args: Any) -> Any:
        if not waited:
            waited.append(True)
            wait_a_minute()
        return _sqlite_format_dtdelta(*args)

    connection.connection.create_function(
        "django_format_dtdelta", 3, format_dtdelta, deterministic=True
    )


waited: list[bool] = []
if WAIT_IN_SQL == "claim":
    connection_created.connect(wait_in_the_first_claim)


@app.task(name="tests.beat_tick", base=Recording)
def beat_tick(entry: str) -> None:
    """Never runs: the sends are recorded."""
