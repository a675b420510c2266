"""A database check: the lock database must not forget what it confirmed.

With ``synchronous_commit = off`` PostgreSQL confirms a commit before its WAL
is on disk, and with ``fsync = off`` it never makes sure it is. A crash (even
an immediate shutdown, with synchronous_commit off) can then forget granted
locks: the next owner gets a lock that is still held, and a fencing token that
was already handed out. Registered with the ``database`` tag, so it runs on
``migrate`` and ``manage.py check --database <alias>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Warning
from django.db import DatabaseError, connections

from django_dlock.conf import conf

RISK = (
    "a crash can forget locks it has already granted: two owners then hold the same "
    "lock, and fencing tokens are issued twice"
)


def check_durability(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Warn when the PostgreSQL lock database runs without durable commits."""
    alias = conf.DATABASE
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            synchronous_commit = cursor.fetchone()[0]
            cursor.execute("SHOW fsync")
            fsync = cursor.fetchone()[0]
    except DatabaseError:
        return []  # an unreachable database is not this check's to report
    messages: list[CheckMessage] = []
    if synchronous_commit == "off":
        messages.append(
            Warning(
                f"DLOCK_DATABASE {alias!r} runs with synchronous_commit = off: {RISK}.",
                hint="Leave synchronous_commit at its default (on) for the lock database, "
                "e.g. ALTER ROLE <lock user> SET synchronous_commit = on.",
                id="django_dlock.W010",
            )
        )
    if fsync == "off":
        messages.append(
            Warning(
                f"DLOCK_DATABASE {alias!r} runs with fsync = off: {RISK}.",
                hint="Turn fsync on (postgresql.conf); it is on by default.",
                id="django_dlock.W011",
            )
        )
    return messages
