"""This process's listeners, one per database alias: ``listener_for(using)``
starts the kind its backend names (``BackendFeatures.listener_class``) on first use,
and ``stop_listeners()`` closes them all (registered to run at exit)."""

from __future__ import annotations

import atexit
from typing import Any

from django.utils.module_loading import import_string

from django_dlock.conf import conf
from django_dlock.listeners.base import Listener
from django_dlock.per_alias import PerAlias
from django_dlock.service import service_for

__all__ = ["listener_for", "stop_listeners"]


def _listener(using: str) -> Listener[Any]:
    listener_class: type[Listener[Any]] = import_string(
        service_for(using).features.listener_class or ""
    )
    return listener_class(using)


_listeners = PerAlias(_listener)


def listener_for(using: str) -> Listener[Any] | None:
    """This process's listener for ``using``, or ``None`` where waiters poll:
    ``DLOCK_LISTEN = False``, a backend that cannot push (see
    ``BackendFeatures.can_listen``), or a listener that found a pooler in between."""
    if conf.LISTEN is False or not service_for(using).features.can_listen:
        return None
    listener = _listeners(using)
    return listener if listener.usable else None


def stop_listeners() -> None:
    """Close every listening connection of this process (at exit; tests call it
    before the test database is dropped). Waiters that need one reopen it."""
    for listener in _listeners.pop_all():
        listener.stop()


atexit.register(stop_listeners)
