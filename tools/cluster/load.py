"""A lock load that writes its history in the torture run's format
(``tools.torture.history``), for ``tools.torture.checker``.

    python -m tools.cluster.load --process NAME --resources a,b --ttl 8 \
        --stop-file PATH --out PATH

Run inside an app host's namespace, with DATABASE_URL pointing at the cluster
through that host's link. Each turn takes a hold as a new owner, of one kind
at random: a writer (exclusive) or a reader (shared) of one of the resources,
a permit of the semaphore ``--semaphore`` (``--limit`` permits), or two of the
resources at once, in any order (``acquire_all``, a part shared now and
then). When it got it, it holds it for ``--hold`` seconds (the critical
section) and releases it. A database error is recorded, then the connection
is dropped, as a request or a Celery task would (``close_old_connections``),
and the loop goes on.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.torture.history import Recorder, error_fields, lock_fields, now, pause
from tools.torture.release_all import release_all_told

# (weight, kind) of a turn.
TURNS = [(45, "exclusive"), (25, "shared"), (15, "permit"), (15, "several")]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--process", required=True)
    parser.add_argument("--resources", required=True)
    parser.add_argument("--semaphore", default="fo:sem")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--ttl", type=float, default=8)
    parser.add_argument("--hold", type=float, default=0.005)
    parser.add_argument("--stop-file", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-seconds", type=float, default=1800)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tools.cluster.settings_pgbouncer")
    import django

    django.setup()
    resources = args.resources.split(",")
    deadline = now() + args.max_seconds
    recorder = Recorder(args.out, args.process)
    turns = 0
    rng = random.Random()
    kinds, weights = [kind for _, kind in TURNS], [weight for weight, _ in TURNS]
    while not args.stop_file.exists() and now() < deadline:
        turns += 1
        owner = f"{args.process}.{turns}"
        kind = rng.choices(kinds, weights)[0]
        if kind == "several":
            names = rng.sample(resources, 2)
            several(recorder, owner, [(n, rng.random() < 0.3) for n in names], args.ttl, args.hold)
        elif kind == "permit":
            turn(recorder, owner, args.semaphore, args.ttl, args.hold, limit=args.limit)
        else:
            # Readers stay longer than writers, so that they meet each other.
            hold = args.hold * (4 if kind == "shared" else 1)
            turn(recorder, owner, rng.choice(resources), args.ttl, hold, shared=kind == "shared")
    recorder.close()


def turn(
    recorder: Recorder,
    owner: str,
    resource: str,
    ttl: float,
    hold: float,
    *,
    shared: bool = False,
    limit: int | None = None,
) -> None:
    """acquire, the critical section, release: as the torture run's manager
    sections record them (without the guarded store)."""
    from django_dlock.models import DistributedLock

    asked: dict[str, Any] = {"shared": True} if shared else {}
    asked |= {"limit": limit} if limit is not None else {}
    acquire_t0 = now()
    acquired = _call(
        recorder,
        "acquire",
        lambda: {
            "lock": lock_fields(
                DistributedLock.objects.acquire(
                    resource, owner=owner, ttl=ttl, shared=shared, limit=limit
                )
            )
        },
        resource=resource,
        owner=owner,
        ttl=ttl,
        **asked,
    )
    if acquired is None or acquired["lock"] is None:
        pause(0.05 if acquired is None else random.uniform(0, 0.004))
        return
    kind = "permit" if limit is not None else "shared" if shared else "exclusive"
    _enter(recorder, owner, resource, acquired["lock"], acquire_t0, kind, limit=limit)
    pause(hold)
    recorder.write("cs_exit", cs=owner, t=now(), expires_at=acquired["lock"]["expires_at"])
    released = _call(
        recorder,
        "release",
        lambda: {"result": DistributedLock.objects.release(resource, owner).value},
        cs=owner,
        resource=resource,
        owner=owner,
    )
    if released is None or released["result"] != "released":
        recorder.write("cs_told", cs=owner, t=now(), how="release failed")


def several(
    recorder: Recorder, owner: str, items: list[tuple[str, bool]], ttl: float, hold: float
) -> None:
    """``acquire_all`` of ``items`` (resource, shared): every lock or none, a
    section per part, released together (``release_all``)."""
    from django_dlock.models import DistributedLock

    resources = [resource for resource, _ in items]
    modes = ["shared" if shared else "exclusive" for _, shared in items]
    asked = [(resource, mode) for resource, mode in zip(resources, modes, strict=True)]
    acquire_t0 = now()
    taken = _call(
        recorder,
        "acquire_all",
        lambda: {
            "locks": _all_fields(DistributedLock.objects.acquire_all(asked, owner=owner, ttl=ttl))
        },
        resources=resources,
        modes=modes,
        owner=owner,
        set=owner,
        ttl=ttl,
    )
    if taken is None or taken["locks"] is None:
        pause(0.05 if taken is None else random.uniform(0, 0.004))
        return
    parts = [f"{owner}/{resource}" for resource in resources]
    for cs, resource, lock, mode in zip(parts, resources, taken["locks"], modes, strict=True):
        _enter(recorder, owner, resource, lock, acquire_t0, mode, cs=cs, set=owner)
    pause(hold)
    for cs, lock in zip(parts, taken["locks"], strict=True):
        recorder.write("cs_exit", cs=cs, t=now(), expires_at=lock["expires_at"])
    release_all_told(
        lambda op, run, **fields: _call(recorder, op, run, **fields),
        lambda cs, how: recorder.write("cs_told", cs=cs, t=now(), how=how),
        resources,
        owner,
        parts,
    )


def _all_fields(holds: list[Any] | None) -> list[dict[str, Any] | None] | None:
    return None if holds is None else [lock_fields(hold) for hold in holds]


def _enter(
    recorder: Recorder,
    owner: str,
    resource: str,
    lock: dict[str, Any],
    acquire_t0: float,
    kind: str,
    *,
    cs: str | None = None,
    **extra: Any,
) -> None:
    recorder.write(
        "cs_enter",
        cs=cs or owner,
        t=now(),
        resource=resource,
        owner=owner,
        token=lock["token"],
        acquired_at=lock["acquired_at"],
        expires_at=lock["expires_at"],
        acquire_t0=acquire_t0,
        kind=kind,
        **{key: value for key, value in extra.items() if value is not None},
    )


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
