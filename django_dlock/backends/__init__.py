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
    "backend_of_alias",
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


def backend_of_alias(using: str) -> LockBackend:
    """``backend_for(using)``, found again by the alias's ``ENGINE`` setting
    rather than its connection: what the lock service asks on every operation.
    ``connections[using]`` reads the thread's connection from asgiref's
    ``Local``, which asks asyncio for a running loop each time: two of them
    were 4% of the client's CPU of an acquisition and its release. The ENGINE
    names the connection's class, and so its vendor: the backend is the one
    ``backend_for`` gave, until the alias is configured with another ENGINE."""
    settings_dict = connections.settings.get(using)
    known = _by_alias.get(using)
    if known is not None and settings_dict is not None and known[0] == settings_dict["ENGINE"]:
        return known[1]
    backend = backend_for(using)  # (an alias that does not exist raises here)
    _by_alias[using] = (connections.settings[using]["ENGINE"], backend)
    return backend


# {alias: (its ENGINE, its backend)}, for ``backend_of_alias``.
_by_alias: dict[str, tuple[str, LockBackend]] = {}


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
