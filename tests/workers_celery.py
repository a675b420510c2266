"""The Celery app and tasks of tests/test_contrib_celery.py.

Worker processes load this module (``celery -A tests.workers_celery worker``);
they find the broker in CELERY_BROKER_URL and the test database's name in
DLOCK_TEST_DB_NAME. Every task run is recorded in the Redis list ``runs``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import django
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
if os.environ.get("DLOCK_TEST_DB_NAME"):
    settings.DATABASES["default"]["NAME"] = os.environ["DLOCK_TEST_DB_NAME"]
django.setup()

import redis  # noqa: E402
from celery import Celery, current_task  # noqa: E402

from django_dlock.contrib.celery import EnqueueOnce, locked_task, task_skipped  # noqa: E402
from django_dlock.exceptions import LockExpired  # noqa: E402
from django_dlock.locking import LockHandle  # noqa: E402

BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")

app = Celery("dlock-tests", broker=BROKER_URL, backend=BROKER_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def record(kind: str, month: str, **details: Any) -> None:
    entry = {"kind": kind, "month": month, "pid": os.getpid(), **details}
    redis.Redis.from_url(BROKER_URL).rpush("runs", json.dumps(entry))


def record_skip(sender: Any, signal: Any, **details: Any) -> None:
    redis.Redis.from_url(BROKER_URL).rpush("skips", json.dumps(details))


if os.environ.get("CELERY_BROKER_URL"):  # a worker process (not the tests' own, nor another broker)
    task_skipped.connect(record_skip)


@app.task(name="tests.exclusive")
@locked_task("report:{month}", ttl=10, timeout=60, on_locked="raise")
def exclusive(month: str, hold: float, fencing_token: int) -> int:
    began = time.time()
    time.sleep(hold)
    record("exclusive", month, began=began, ended=time.time(), token=fencing_token)
    return fencing_token


@app.task(name="tests.skipping")
@locked_task("report:{month}", ttl=10, on_locked="skip")
def skipping(month: str) -> str:
    record("skipping", month)
    return "ran"


@app.task(name="tests.retrying", max_retries=30)
@locked_task("report:{month}", ttl=10, timeout=0, on_locked="retry", min_countdown=0.2)
def retrying(month: str, fencing_token: int) -> str:
    record(
        "retrying",
        month,
        began=time.time(),
        retries=current_task.request.retries,
        token=fencing_token,
    )
    return "ran"


@app.task(name="tests.raising")
@locked_task(lambda month: f"report:{month}", on_locked="raise")
def raising(month: str) -> str:
    record("raising", month)
    return "ran"


@app.task(name="tests.long_running", max_retries=30)
@locked_task("report:{month}", ttl=3, on_locked="retry", min_countdown=0.2)
def long_running(month: str, hold: float, fencing_token: int) -> int:
    record("long_running", month, began=time.time(), token=fencing_token, hold=hold)
    time.sleep(hold)
    record("long_running_done", month, ended=time.time(), token=fencing_token)
    return fencing_token


@app.task(name="tests.contended", max_retries=50)
@locked_task("contended:{key}", ttl=30, on_locked="retry")
def contended(key: str, hold: float, fencing_token: int) -> int:
    began = time.time()
    time.sleep(hold)
    record("contended", key, began=began, ended=time.time(), token=fencing_token)
    return fencing_token


@app.task(name="tests.with_handle")
@locked_task("handle:{name}", ttl=30)
def with_handle(name: str, held: LockHandle, fencing_token: int) -> list[Any]:
    return [held.resource, held.fencing_token == fencing_token, held.is_lost]


@app.task(name="tests.stoppable")
@locked_task("stop:{name}", ttl=3, on_lost="stop")
def stoppable(name: str, hold: float, fencing_token: int, step: float | None = None) -> str:
    """Sleeps ``hold`` seconds: at once, or in steps (a thread is stopped between them)."""
    record("stoppable", name, began=time.time(), token=fencing_token)
    try:
        end = time.monotonic() + hold
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, step or left))
    except BaseException as error:
        expired = isinstance(error, LockExpired)
        record("stopped", name, at=time.time(), error=type(error).__name__, expired=expired)
        raise
    record("not_stopped", name, at=time.time())
    return "slept"


@app.task(name="tests.redelivered", acks_late=True, reject_on_worker_lost=True)
@locked_task("redeliver:{name}", ttl=30, on_locked="skip")
def redelivered(name: str, fencing_token: int) -> int:
    client = redis.Redis.from_url(BROKER_URL)
    first = client.set(f"first-delivery:{name}", "1", nx=True)
    record("redelivered", name, began=time.time(), token=fencing_token, first=bool(first))
    if first:
        time.sleep(60)  # the test kills this process meanwhile
    return fencing_token


@app.task(name="tests.bound", bind=True, max_retries=30)
@locked_task("bound:{name}", ttl=10, timeout=0, on_locked="retry", min_countdown=0.2)
def bound(self: Any, name: str, fencing_token: int) -> list[Any]:
    return [self.request.retries, fencing_token]


@app.task(name="tests.once", base=EnqueueOnce)
@locked_task("once:{name}", ttl=3, on_duplicate="raise", queued_ttl=60)
def once(name: str, gate: bool = False) -> str:
    """With ``gate``, runs until the test pushes to the Redis list ``gate:<name>``."""
    record("once", name, began=time.time())
    if gate:
        redis.Redis.from_url(BROKER_URL).blpop([f"gate:{name}"], timeout=60)
    return "ran"


@app.task(name="tests.once_skipping", base=EnqueueOnce)
@locked_task("once:{name}", ttl=3, on_duplicate="skip", queued_ttl=2)
def once_skipping(name: str) -> str:
    record("once_skipping", name)
    return "ran"


@app.task(name="tests.once_retrying", base=EnqueueOnce, max_retries=30)
@locked_task(
    "once:{name}", ttl=10, timeout=0, on_locked="retry", min_countdown=0.2, on_duplicate="raise"
)
def once_retrying(name: str) -> int:
    retries: int = current_task.request.retries
    record("once_retrying", name, retries=retries)
    return retries
