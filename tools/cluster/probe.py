"""Lock calls through the library, for the harness, printing JSON.

    python -m tools.cluster.probe acquire RESOURCE OWNER TTL
    python -m tools.cluster.probe sentinels PREFIX OWNER TTL

``acquire`` prints the lock's fields as the torture history keeps them
(owner, token, acquired_at, expires_at, mode, hold count), or null when it is
held. ``sentinels`` takes a hold of each kind under names starting with
PREFIX (a writer's, a reader's, a permit of a semaphore of 2, and two locks
at once) and prints each call as a history event of its own (the harness's
clock: the monotonic one, which the host's processes share). DATABASE_URL
says where.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

SENTINEL_KINDS = ("exclusive", "shared", "permit", "several")


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tools.cluster.settings_pgbouncer")
    import django

    django.setup()
    from django_dlock.models import DistributedLock
    from tools.torture.history import lock_fields

    command, resource, owner, ttl = argv
    if command == "acquire":
        lock = DistributedLock.objects.acquire(resource, owner=owner, ttl=float(ttl))
        sys.stdout.write(json.dumps(lock_fields(lock)) + "\n")
    elif command == "sentinels":
        sys.stdout.write(json.dumps(sentinels(resource, owner, float(ttl))) + "\n")
    else:
        sys.exit(f"unknown command {command!r}: acquire or sentinels")


def sentinels(prefix: str, owner: str, ttl: float) -> list[dict[str, Any]]:
    """A hold of each kind (see the module's docstring), as history events."""
    from django_dlock.models import DistributedLock
    from tools.torture.history import lock_fields, now

    manager = DistributedLock.objects
    events: list[dict[str, Any]] = []
    for kind in SENTINEL_KINDS:
        resource = f"{prefix}:{kind}"
        fields: dict[str, Any] = {"resource": resource, "owner": owner, "ttl": ttl}
        t0 = now()
        if kind == "several":
            names = [f"{resource}-a", f"{resource}-b"]
            holds = manager.acquire_all(names, owner=owner, ttl=ttl)
            locks = None if holds is None else [lock_fields(hold) for hold in holds]
            fields = {"resources": names, "modes": ["exclusive"] * 2, "owner": owner, "ttl": ttl}
            events.append({"op": "acquire_all", "t0": t0, "t1": now(), "locks": locks} | fields)
            continue
        asked: dict[str, Any] = {"shared": kind == "shared"}
        asked["limit"] = 2 if kind == "permit" else None
        hold = manager.acquire(resource, owner=owner, ttl=ttl, **asked)
        fields |= {key: value for key, value in asked.items() if value}
        events.append({"op": "acquire", "t0": t0, "t1": now(), "lock": lock_fields(hold)} | fields)
    return events


if __name__ == "__main__":
    main(sys.argv[1:])
