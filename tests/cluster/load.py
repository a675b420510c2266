"""A lock load that writes its history in the torture run's format
(``tests.torture.history``), for ``tests.torture.checker``.

    python -m tests.cluster.load --process NAME --resources a,b --ttl 8 \
        --stop-file PATH --out PATH

Run inside an app host's namespace, with DATABASE_URL pointing at the cluster
through that host's link. Each turn acquires a random resource as a new owner,
and when it got it holds it for ``--hold`` seconds (the critical section) and
releases it. A database error is recorded, then the connection is dropped, as a
request or a Celery task would (``close_old_connections``), and the loop goes on.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.torture.history import Recorder, error_fields, lock_fields, now, pause


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--process", required=True)
    parser.add_argument("--resources", required=True)
    parser.add_argument("--ttl", type=float, default=8)
    parser.add_argument("--hold", type=float, default=0.005)
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-seconds", type=float, default=1800)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.cluster.settings_pgbouncer")
    import django

    django.setup()
    resources = args.resources.split(",")
    deadline = now() + args.max_seconds
    recorder = Recorder(args.out, args.process)
    turns = 0
    while not args.stop_file.exists() and now() < deadline:
        turns += 1
        turn(recorder, f"{args.process}.{turns}", random.choice(resources), args.ttl, args.hold)
    recorder.close()


def turn(recorder: Recorder, owner: str, resource: str, ttl: float, hold: float) -> None:
    """acquire, the critical section, release: as the torture run's manager
    sections record them (without the guarded store)."""
    from django_dlock.models import DistributedLock

    acquire_t0 = now()
    acquired = _call(
        recorder,
        "acquire",
        lambda: {
            "lock": lock_fields(DistributedLock.objects.acquire(resource, owner=owner, ttl=ttl))
        },
        resource=resource,
        owner=owner,
        ttl=ttl,
    )
    if acquired is None or acquired["lock"] is None:
        pause(0.05 if acquired is None else random.uniform(0, 0.004))
        return
    lock = acquired["lock"]
    cs = owner
    recorder.write(
        "cs_enter",
        cs=cs,
        t=now(),
        resource=resource,
        owner=owner,
        token=lock["token"],
        acquired_at=lock["acquired_at"],
        expires_at=lock["expires_at"],
        acquire_t0=acquire_t0,
    )
    pause(hold)
    recorder.write("cs_exit", cs=cs, t=now(), expires_at=lock["expires_at"])
    released = _call(
        recorder,
        "release",
        lambda: {"result": DistributedLock.objects.release(resource, owner).value},
        cs=cs,
        resource=resource,
        owner=owner,
    )
    if released is None or released["result"] != "released":
        recorder.write("cs_told", cs=cs, t=now(), how="release failed")


def _call(
    recorder: Recorder, op: str, run: Callable[[], dict[str, Any]], **fields: Any
) -> dict[str, Any] | None:
    """Run one lock call and record it; None when it raised."""
    from django.db import Error, close_old_connections

    t0 = now()
    try:
        outcome = run()
    except Error as error:
        recorder.write(op, t0=t0, t1=now(), error=error_fields(error), **fields)
        close_old_connections()
        return None
    recorder.write(op, t0=t0, t1=now(), **fields, **outcome)
    return outcome


if __name__ == "__main__":
    main(sys.argv[1:])
