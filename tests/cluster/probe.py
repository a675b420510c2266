"""One lock call through the library, for the harness, printing JSON.

    python -m tests.cluster.probe acquire RESOURCE OWNER TTL
    python -m tests.cluster.probe read RESOURCE [RESOURCE ...]

``read`` prints, per resource, its row (owner, fencing token, whether it is
held now) or null. DATABASE_URL says where.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.cluster.settings_pgbouncer")
    import django

    django.setup()
    from django_dlock.models import DistributedLock

    command, *args = argv
    answer: Any
    if command == "acquire":
        resource, owner, ttl = args
        lock = DistributedLock.objects.acquire(resource, owner=owner, ttl=float(ttl))
        answer = (
            None if lock is None else {"owner": lock.owner, "fencing_token": lock.fencing_token}
        )
    else:
        held = set(
            DistributedLock.objects.active()
            .filter(resource__in=args)
            .values_list("resource", flat=True)
        )
        answer = {
            row["resource"]: {**row, "held": row["resource"] in held}
            for row in DistributedLock.objects.filter(resource__in=args).values(
                "resource", "owner", "fencing_token"
            )
        }
    sys.stdout.write(json.dumps(answer) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
