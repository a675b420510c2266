"""The raw SQL of django-dlock, one package per database vendor behind ``LockBackend``.

``backend_for(using)`` gives the backend of a database alias. Nothing outside
this package formats SQL.
"""

from __future__ import annotations

from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string

from django_dlock.backends.base import LockBackend
from django_dlock.backends.queue_row import QueueRow

__all__ = [
    "BACKENDS",
    "LockBackend",
    "QueueRow",
    "backend_for",
]

#: The backend class of each supported ``connection.vendor``. Imported only
#: when a database of that vendor is used: a vendor module may import its
#: driver (psycopg), which a project on another database need not install.
BACKENDS: dict[str, str] = {
    "mysql": "django_dlock.backends.mysql.MySQLBackend",
    "postgresql": "django_dlock.backends.postgresql.PostgreSQLBackend",
    "sqlite": "django_dlock.backends.sqlite.SQLiteBackend",
}


def backend_for(using: str) -> LockBackend:
    """The backend of the database alias ``using``; ``ImproperlyConfigured`` when
    its vendor is not supported (``manage.py check`` reports that as E006)."""
    return _backend(using, connections[using].vendor)


@cache
def _backend(using: str, vendor: str) -> LockBackend:
    # The vendor is in the key so that tests that swap a database's settings
    # never get another backend's SQL.
    try:
        backend_path = BACKENDS[vendor]
    except KeyError:
        raise ImproperlyConfigured(
            f"Database {using!r} is {vendor}; django-dlock supports {', '.join(sorted(BACKENDS))}."
        ) from None
    backend_class: type[LockBackend] = import_string(backend_path)
    return backend_class(using)
