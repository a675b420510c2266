"""One lock call through the library, for the harness, printing JSON.

    python -m tests.cluster.probe acquire RESOURCE OWNER TTL

prints the lock's fields as the torture history keeps them (owner, token,
acquired_at, expires_at), or null when it is held. DATABASE_URL says where.
"""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.cluster.settings_pgbouncer")
    import django

    django.setup()
    from django_dlock.models import DistributedLock
    from tests.torture.history import lock_fields

    command, resource, owner, ttl = argv
    if command != "acquire":
        sys.exit(f"unknown command {command!r}: only acquire")
    lock = DistributedLock.objects.acquire(resource, owner=owner, ttl=float(ttl))
    sys.stdout.write(json.dumps(lock_fields(lock)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
