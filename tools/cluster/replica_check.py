"""Lock reads and writes go to the primary even when a router sends reads to a
replica, and the system check flags a replica as DLOCK_DATABASE.

    DATABASE_URL=<primary, via PgBouncer> DLOCK_REPLICA_URL=<one replica> \
        python -m tools.cluster.replica_check

Replay on the replica is paused first, so that it lags for sure: whatever
reads it would miss the lock just taken. Prints what it found as JSON (the
test asserts on it).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tools.cluster.settings_replica")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connections
    from django.test.utils import setup_test_environment

    setup_test_environment()
    name = f"replica-check-{uuid.uuid4().hex[:8]}"
    user = User.objects.db_manager("default").create_superuser(name, password=None)
    deadline = time.monotonic() + 60
    while not User.objects.filter(pk=user.pk).exists():  # read from the replica
        if time.monotonic() > deadline:
            raise SystemExit("the replica did not catch up within 60 s")
        time.sleep(0.2)
    with connections["replica"].cursor() as cursor:
        cursor.execute("SELECT pg_wal_replay_pause()")
    # The pause takes hold at the next WAL record: write until it has.
    from django_dlock.models import DistributedLock

    while _replica_state() != "paused":
        if time.monotonic() > deadline:
            raise SystemExit("the replica's replay did not pause within 60 s")
        DistributedLock.objects.acquire("replica:nudge", ttl=1)
        time.sleep(0.1)
    try:
        found = _while_lagging(user)
    finally:
        with connections["replica"].cursor() as cursor:
            cursor.execute("SELECT pg_wal_replay_resume()")
    found["checks"] = _checks()
    sys.stdout.write(json.dumps(found) + "\n")


def _while_lagging(user: Any) -> dict[str, Any]:
    from django.test import Client
    from rest_framework.test import APIClient

    from django_dlock.models import DistributedLock

    resource = f"replica:{uuid.uuid4().hex[:8]}"
    lock = DistributedLock.objects.acquire(resource, owner="holder", ttl=60)
    api = APIClient()
    api.force_authenticate(user)
    admin = Client()
    admin.force_login(user)
    listing = admin.get("/admin/django_dlock/distributedlock/", {"q": resource})
    found = {
        "replay": _replica_state(),
        "acquired": lock is not None,
        "replica_has_it": DistributedLock.objects.using("replica")
        .filter(resource=resource)
        .exists(),
        "plain_read_alias": DistributedLock.objects.all().db,
        "active_has_it": DistributedLock.objects.active().filter(resource=resource).exists(),
        "api_get": api.get(f"/api/locks/{resource}").status_code,
        "api_list_has_it": resource in api.get("/api/locks", {"prefix": resource}).content.decode(),
        "admin_status": listing.status_code,
        "admin_has_it": resource in listing.content.decode(),
        "other_acquirer_refused": DistributedLock.objects.acquire(resource, owner="other") is None,
        "renewed": DistributedLock.objects.renew(resource, "holder", ttl=60) is not None,
        "released": DistributedLock.objects.release(resource, "holder").value,
    }
    return found


def _replica_state() -> str:
    from django.db import connections

    with connections["replica"].cursor() as cursor:
        cursor.execute("SELECT pg_get_wal_replay_pause_state()")
        (state,) = cursor.fetchone()
    return str(state)


# The throwaway cluster runs with fsync off (a kill -9 of PostgreSQL keeps the
# OS's page cache), which the durability check rightly warns about.
DURABILITY_WARNINGS = {"django_dlock.W010", "django_dlock.W011"}


def _checks() -> dict[str, list[str]]:
    from django.core.checks import run_checks
    from django.test import override_settings

    ids = {}
    for alias in ("default", "replica", "replica_unmarked"):
        with override_settings(DLOCK_DATABASE=alias):
            messages = run_checks(databases=["default", "replica", "replica_unmarked"])
        ids[alias] = sorted(
            m.id
            for m in messages
            if m.id and m.id.startswith("django_dlock") and m.id not in DURABILITY_WARNINGS
        )
    return ids


if __name__ == "__main__":
    main()
