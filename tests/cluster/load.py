"""A lock load that writes its history, one JSON line per call, for the checker.

    python -m tests.cluster.load --process NAME --resources a,b --ttl 8 \
        --stop-file PATH --out PATH

Run inside an app host's namespace, with DATABASE_URL pointing at the cluster
through that host's link. Each turn acquires a random resource, and when it
got it holds it for ``--hold`` seconds (the critical section) and releases it.
A database error is recorded, then the connection is dropped, as a request or
a Celery task would (``close_old_connections``), and the loop goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import IO, Any


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
    deadline = time.monotonic() + args.max_seconds
    with args.out.open("a") as out:
        while not args.stop_file.exists() and time.monotonic() < deadline:
            turn(args.process, random.choice(resources), args.ttl, args.hold, out)


def turn(process: str, resource: str, ttl: float, hold: float, out: IO[str]) -> None:
    from django_dlock.models import DistributedLock

    call = _call(
        process,
        "acquire",
        {"resource": resource, "owner": process, "ttl": ttl},
        lambda: DistributedLock.objects.acquire(resource, owner=process, ttl=ttl),
    )
    lock = call.pop("result", None)
    if lock is not None:
        call["enter"] = time.monotonic()
        time.sleep(hold)
        call["exit"] = time.monotonic()
    _write(out, call)
    if lock is None:
        time.sleep(0.05 if "exception" in call["outcome"] else random.uniform(0, 0.004))
        return
    release = _call(
        process,
        "release",
        {"resource": resource, "owner": process},
        lambda: DistributedLock.objects.release(resource, owner=process),
    )
    release.pop("result", None)
    _write(out, release)


def _call(process: str, op: str, args: dict[str, Any], run: Any) -> dict[str, Any]:
    from django.db import Error, close_old_connections

    call: dict[str, Any] = {"process": process, "op": op, "args": args, "start": time.monotonic()}
    try:
        result = run()
    except Error as error:
        call["end"] = time.monotonic()
        call["outcome"] = {"exception": f"{type(error).__name__}: {str(error).strip()[:200]}"}
        close_old_connections()
        return call
    call["end"] = time.monotonic()
    call["result"] = result
    if op == "release":
        call["outcome"] = {"result": result.value}
    elif result is None:
        call["outcome"] = {"acquired": False}
    else:
        call["outcome"] = {
            "acquired": True,
            "fencing_token": result.fencing_token,
            "acquired_at": result.acquired_at.isoformat(),
            "expires_at": result.expires_at.isoformat(),
        }
    return call


def _write(out: IO[str], call: dict[str, Any]) -> None:
    out.write(json.dumps(call) + "\n")
    out.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
