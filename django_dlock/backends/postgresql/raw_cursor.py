"""The psycopg cursor that the PostgreSQL backend's statements run on where
nobody watches Django's cursor (``PostgreSQLBackend._run``): one per Django
connection, kept while its psycopg connection lives, instead of a new one per
statement (each new cursor copies the connection's adapters).

Django reads ``timestamptz`` with a loader of its own (``BaseTzLoader``), a
subclass of psycopg's pure-Python loader that puts the connection's time zone
on each value, so psycopg's compiled loader (psycopg-binary, psycopg-c) never
runs. A lock row carries three timestamps and the database's now, and parsing
them in Python was a tenth of an operation's client CPU. Where Django's zone
is UTC (``USE_TZ`` with no database ``TIME_ZONE``, when Django sets the
session's ``TimeZone`` to UTC), psycopg's own loader gives the same values
with the same ``tzinfo`` (``datetime.timezone.utc``), so the kept cursor reads
with it. Elsewhere the cursor reads as Django's own would.
"""

from __future__ import annotations

import datetime
import weakref
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.types.datetime import TimestamptzLoader

__all__ = ["kept_cursor"]

# {Django's connection: (its psycopg connection, the cursor kept on it, whether
# it reads timestamps with psycopg's loader)}. Each thread has its own Django
# connection; a Django connection that goes takes its entry with it.
_kept: weakref.WeakKeyDictionary[BaseDatabaseWrapper, tuple[Any, Any, bool]] = (
    weakref.WeakKeyDictionary()
)


def kept_cursor(connection: BaseDatabaseWrapper, raw: Any) -> Any:
    """The cursor kept on ``raw``, the psycopg connection of ``connection``
    (open): made on first use, and again when the connection is a new one or
    Django's time zone changed (``override_settings``)."""
    utc = connection.timezone is datetime.UTC
    kept = _kept.get(connection)
    if kept is not None and kept[0] is raw and kept[2] == utc:
        return kept[1]
    cursor = raw.cursor()
    if utc and raw.info.parameter_status("TimeZone") == "UTC":
        # psycopg's own class: its adapters map swaps in the compiled one.
        cursor.adapters.register_loader("timestamptz", TimestamptzLoader)
    _kept[connection] = (raw, cursor, utc)
    return cursor
