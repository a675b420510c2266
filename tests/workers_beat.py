"""The Celery app of tests/test_contrib_beat.py: ``celery -A tests.workers_beat beat
-S tests.workers_beat:FastLeader``.

Its two entries are due every second. Nothing consumes their messages: the task's
``apply_async`` records each send (entry, due time, pid) in the Redis list ``sends``
of CELERY_BROKER_URL instead. The test database's name is in DLOCK_TEST_DB_NAME.
"""

from __future__ import annotations

import json
import os
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

from django_dlock.contrib.beat import DUE_HEADER, Leadership  # noqa: E402
from django_dlock.contrib.celery import LeaderScheduler  # noqa: E402

BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
# The leader's lease in these tests (seconds): the failover window follows from it.
LEASE = 2.0

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


@app.task(name="tests.beat_tick", base=Recording)
def beat_tick(entry: str) -> None:
    """Never runs: the sends are recorded."""
