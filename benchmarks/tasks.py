"""The goals of locks in tasks (issue 25), with real workers: ``python -m benchmarks.tasks``.

Celery workers on a throwaway redis-server and django-tasks-db ``db_worker`` processes, on
a fresh SQLite file (or the database of DATABASE_URL, whose tables it creates), running the
tasks of ``tests/workers_celery.py`` and ``tests/workers_tasks.py``. Prints one table:

- Celery ``retry``: ttl 30, 3 s of work, 4 same-key calls on 4 worker processes: the time
  from sending to the last end, and the longest gap between one run's end and the next start;
- Celery ``on_lost="stop"`` (ttl 3) in the solo and prefork pools: how long after a
  force-release the body stopped, and how long it ran beside the next holder;
- ``acks_late`` + ``reject_on_worker_lost``, the pool's child SIGKILLed: runs of the work,
  and how long after the kill the redelivered run began;
- django.tasks: 24 tasks on 2 keys across 4 ``db_worker`` processes with ``raise`` (waiting),
  ``skip`` and ``defer``: overlaps, runs, skips, deferrals, time.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

Row = tuple[str, str, str]


def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="dlock-bench-tasks-"))
    os.environ.setdefault("DLOCK_TEST_SQLITE_FILE", str(directory / "tasks.sqlite3"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    from tests.task_processes import CeleryWorkers, DbWorkers, Redis

    redis = Redis(directory)
    name = str(connection.settings_dict["NAME"])
    celery = CeleryWorkers(directory, name, redis.url)
    db_workers = DbWorkers(directory, name)
    rows: list[Row] = []
    try:
        from tests.workers_celery import app

        app.conf.update(broker_url=redis.url, result_backend=redis.url)
        rows += celery_retry(celery, redis)
        rows += celery_stop(celery, redis)
        rows += celery_redelivery(celery, redis)
        celery.stop_all()
        rows += django_tasks(db_workers)
    finally:
        celery.stop_all()
        db_workers.stop_all()
        redis.stop()
    print(f"database: {connection.vendor}")
    width = max(len(row[0]) for row in rows)
    print(f"| {'scenario':<{width}} | goal | measured |")
    print(f"| {'-' * width} | --- | --- |")
    for scenario, goal, measured in rows:
        print(f"| {scenario:<{width}} | {goal} | {measured} |")


def celery_retry(celery: Any, redis: Any) -> list[Row]:
    from tests.task_processes import overlaps
    from tests.workers_celery import contended

    celery.start("retry-1", queues="retry", pool="prefork", concurrency=2)
    celery.start("retry-2", queues="retry", pool="prefork", concurrency=2)
    redis.client.delete("runs")
    sent = time.time()
    results = [contended.apply_async(("bench", 3.0), queue="retry") for _ in range(4)]
    for result in results:
        result.get(timeout=300)
    runs = sorted(
        (entry for entry in redis.list("runs") if entry["kind"] == "contended"),
        key=lambda entry: entry["began"],
    )
    total = max(entry["ended"] for entry in runs) - sent
    gaps = [after["began"] - before["ended"] for before, after in zip(runs, runs[1:], strict=False)]
    return [
        ("Celery retry: 4 same-key calls, ttl 30, 3 s work", "<= 15 s", f"{total:.1f} s"),
        ("Celery retry: lock free until the next run starts", "<= 1 s", f"max {max(gaps):.2f} s"),
        ("Celery retry: overlaps", "0", str(len(overlaps(runs, key="month")))),
    ]


def celery_stop(celery: Any, redis: Any) -> list[Row]:
    from django_dlock.models import DistributedLock
    from tests.utils import wait_for
    from tests.workers_celery import stoppable

    rows: list[Row] = []
    for pool in ("solo", "prefork"):
        celery.start(f"stop-{pool}", queues=f"stop-{pool}", pool=pool)
        redis.client.delete("runs")
        result = stoppable.apply_async((pool, 60), queue=f"stop-{pool}")
        wait_for(lambda: redis.list("runs"), 60, "the run to start")
        resource = f"stop:{pool}"
        DistributedLock.objects.force_release(resource)
        released = time.time()
        DistributedLock.objects.acquire(resource, "next-holder", ttl=60)
        next_holder = time.time()
        try:
            result.get(timeout=60)
            outcome = "not stopped"
        except Exception as error:
            outcome = type(error).__name__
        [stopped] = [entry for entry in redis.list("runs") if entry["kind"] == "stopped"]
        DistributedLock.objects.release(resource, "next-holder")
        rows.append(
            (
                f"Celery on_lost=stop ({pool}): stopped after the force-release",
                "<= ttl/3 + 1 s = 2 s",
                f"{stopped['at'] - released:.2f} s (the task failed with {outcome})",
            )
        )
        rows.append(
            (
                f"Celery on_lost=stop ({pool}): beside the next holder",
                "<= 2 s",
                f"{max(stopped['at'] - next_holder, 0):.2f} s",
            )
        )
    return rows


def celery_redelivery(celery: Any, redis: Any) -> list[Row]:
    from tests.utils import wait_for
    from tests.workers_celery import redelivered

    celery.start("acks-late", queues="acks-late", pool="prefork")
    redis.client.delete("runs", "first-delivery:bench")
    result = redelivered.apply_async(("bench",), queue="acks-late")
    [first] = wait_for(lambda: redis.list("runs"), 60, "the first delivery")
    time.sleep(0.5)
    os.kill(first["pid"], signal.SIGKILL)
    killed = time.time()
    result.get(timeout=120)
    runs = [entry for entry in redis.list("runs") if entry["kind"] == "redelivered"]
    again = runs[-1]["began"] - killed if len(runs) > 1 else float("nan")
    return [
        (
            "Celery acks_late + SIGKILL: runs of the work after the kill",
            "exactly 1",
            str(len(runs) - 1),
        ),
        (
            "Celery acks_late + SIGKILL: redelivered run began",
            "<= ttl + 1 s = 31 s",
            f"{again:.2f} s",
        ),
    ]


def django_tasks(db_workers: Any) -> list[Row]:
    from django_dlock.contrib.tasks import SKIPPED, deferred_to
    from tests.task_processes import finished, overlaps
    from tests.workers_tasks import deferring_work, exclusive, skipping

    db_workers.start(4)
    rows: list[Row] = []
    for label, prefix, task, hold in (
        ("raise (waits up to 60 s)", "raise", exclusive, 0.1),
        ("skip", "skip", skipping, 0.3),
        ("defer (timeout=0)", "defer", deferring_work, 0.1),
    ):
        db_workers.runs_file.write_text("")
        started = time.time()
        results = [task.enqueue(f"{prefix}-{number % 2}", hold) for number in range(24)]
        skipped = deferrals = 0
        failed: list[str] = []
        for result in results:
            while finished(result, 300).status == "SUCCESSFUL":
                next_id = deferred_to(result.return_value)
                if next_id is None:
                    skipped += result.return_value == SKIPPED
                    break
                deferrals += 1
                result = task.get_result(next_id)
            else:
                failed.append(result.errors[-1].traceback.strip().splitlines()[-1])
        runs = db_workers.runs()
        took = time.time() - started
        rows.append(
            (
                f"django.tasks {label}: 24 tasks, 2 keys, 4 db_workers",
                "0 overlaps",
                f"{len(overlaps(runs))} overlaps; {len(runs)} ran, {skipped} skipped, "
                f"{deferrals} deferrals, {len(failed)} failed {sorted(set(failed))}; {took:.1f} s",
            )
        )
    return rows


if __name__ == "__main__":
    main()
