"""Renewing many locks in one statement (moves into the backends)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from django.db import connections
from django.db.models import DurationField, Value

from django_dlock import signals
from django_dlock.db import DatabaseNow, compile_expression

if TYPE_CHECKING:
    from django_dlock.models import DistributedLock

# Pairs per statement: well under SQLite's and PostgreSQL's parameter limits.
CHUNK = 500


def renew_many(
    using: str, pairs: Sequence[tuple[str, str]], ttl: float
) -> dict[tuple[str, str], DistributedLock]:
    """Extend each (resource, owner) lock that owner validly holds to ``ttl``
    seconds from now; the renewed locks. One statement per ``CHUNK`` locks."""
    from django_dlock.models import DistributedLock

    connection = connections[using]
    qn = connection.ops.quote_name
    table = qn(DistributedLock._meta.db_table)
    columns = ", ".join(qn(field.column) for field in DistributedLock._meta.concrete_fields)
    now_sql, now_params = compile_expression(using, DatabaseNow())
    expires_sql, expires_params = compile_expression(
        using, DatabaseNow() + Value(timedelta(seconds=ttl), output_field=DurationField())
    )
    renewed: dict[tuple[str, str], DistributedLock] = {}
    for start in range(0, len(pairs), CHUNK):
        chunk = pairs[start : start + CHUNK]
        values = ", ".join(["(%s, %s)"] * len(chunk))
        # Only quoted identifiers and Django-compiled SQL are formatted in; values are parameters.
        sql = (
            f"UPDATE {table} SET {qn('expires_at')} = {expires_sql} "  # noqa: S608
            f"WHERE ({qn('resource')}, {qn('owner')}) IN (VALUES {values}) "
            f"AND {qn('expires_at')} > {now_sql} RETURNING {columns}"
        )
        params = [*expires_params, *(value for pair in chunk for value in pair), *now_params]
        for lock in DistributedLock.objects.db_manager(using).raw(sql, params):
            renewed[(lock.resource, lock.owner)] = lock
    for lock in renewed.values():
        signals.lock_renewed.send(sender=DistributedLock, lock=lock)
    return renewed


def renewal_failures(using: str, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Why each (resource, owner) lock could not be renewed (one SELECT)."""
    from django_dlock.locking.renewal import RenewalFailure
    from django_dlock.models import DistributedLock

    if not pairs:
        return {}
    owners = dict(
        DistributedLock.objects.using(using)
        .filter(resource__in=[resource for resource, _ in pairs])
        .values_list("resource", "owner")
    )
    failures: dict[tuple[str, str], str] = {}
    for resource, owner in pairs:
        holder = owners.get(resource)
        if holder in (None, ""):
            failures[(resource, owner)] = RenewalFailure.GONE.value
        elif holder != owner:
            failures[(resource, owner)] = RenewalFailure.TAKEN_OVER.value
        else:
            failures[(resource, owner)] = RenewalFailure.EXPIRED.value
    return failures
