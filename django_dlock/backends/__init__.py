"""The raw SQL of django-dlock, one package per database vendor behind ``LockBackend``.

``backend_for(using)`` gives the backend of a database alias, and
``listener_for(using)`` this process's listener for it, of the kind its backend
chooses (``django_dlock.listeners``). Nothing outside this package formats SQL.
"""

from __future__ import annotations

import atexit
from functools import cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string

from django_dlock.backends.base import LockBackend
from django_dlock.backends.queue import QueueRow
from django_dlock.conf import conf
from django_dlock.listeners.base import Listener
from django_dlock.per_alias import PerAlias

__all__ = [
    "BACKENDS",
    "LockBackend",
    "QueueRow",
    "backend_for",
    "listener_for",
    "stop_listeners",
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


def _listener(using: str) -> Listener[Any]:
    listener_class: type[Listener[Any]] = import_string(
        backend_for(using).features.listener_class or ""
    )
    return listener_class(using)


_listeners = PerAlias(_listener)


def listener_for(using: str) -> Listener[Any] | None:
    """This process's listener for ``using``, or ``None`` where waiters poll:
    ``DLOCK_LISTEN = False``, a backend that cannot push (see
    ``BackendFeatures.can_listen``), or a listener that found a pooler in between."""
    if conf.LISTEN is False or not backend_for(using).features.can_listen:
        return None
    listener = _listeners(using)
    return listener if listener.usable else None


def stop_listeners() -> None:
    """Close every listening connection of this process (at exit; tests call it
    before the test database is dropped). Waiters that need one reopen it."""
    for listener in _listeners.pop_all():
        listener.stop()


atexit.register(stop_listeners)
