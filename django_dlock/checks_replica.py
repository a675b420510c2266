"""``manage.py check``: the lock database must be a primary, never a replica.

A replica refuses writes (every lock operation would raise) and, read directly,
lags behind the primary: a lock could look free that is held.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.db import connections

from django_dlock.conf import conf


def _lock_alias() -> str | None:
    """``DLOCK_DATABASE`` when it names a database (``check_settings`` reports it otherwise)."""
    alias = conf.DATABASE
    return alias if isinstance(alias, str) and alias in settings.DATABASES else None


def check_lock_database_not_mirror(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A ``TEST: {"MIRROR": ...}`` alias is, by Django's convention, a replica."""
    alias = _lock_alias()
    if alias is None:
        return []
    mirror = (settings.DATABASES[alias].get("TEST") or {}).get("MIRROR")
    if not mirror:
        return []
    return [
        Error(
            f"DLOCK_DATABASE {alias!r} is a replica of {mirror!r} (its TEST['MIRROR']): "
            "locks must be written to and read from the primary.",
            hint=f"Set DLOCK_DATABASE to {mirror!r}, or to an alias of the primary.",
            id="django_dlock.E401",
        )
    ]


def check_lock_database_is_primary(
    app_configs: Any = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Asks the server, when the checks may use the database (``check
    --database ALIAS``, ``migrate``)."""
    alias = _lock_alias()
    if alias is None or alias not in (databases or ()):
        return []
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_is_in_recovery()")
        (in_recovery,) = cursor.fetchone()
    if not in_recovery:
        return []
    return [
        Error(
            f"DLOCK_DATABASE {alias!r} is a PostgreSQL replica (pg_is_in_recovery() is "
            "true): it refuses lock writes, and its reads lag behind the primary.",
            hint="Point DLOCK_DATABASE at an alias of the primary (or of a pooler or "
            "proxy that routes to the primary).",
            id="django_dlock.E402",
        )
    ]
