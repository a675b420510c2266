"""The labels that metrics and traces give a lock: its kind and its resource
group. Never its whole resource name (Prometheus keeps a time series per label
value, and names like ``order:1234`` are unbounded) and never its owner (a
secret: knowing it is the right to release)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from typing import Any

from django.utils.module_loading import import_string

from django_dlock.conf import conf

__all__ = ["group_function", "lock_kind", "resource_group"]

logger = logging.getLogger("django_dlock")

EXCLUSIVE, SHARED, SEMAPHORE = "exclusive", "shared", "semaphore"


def resource_group(resource: str) -> str:
    """``DLOCK_RESOURCE_GROUP(resource)``; by default the part of the name before
    its first ":" (``job:42`` is in group ``job``), and "" for a name without
    one. A function that fails or answers something else than a string gives ""."""
    setting = conf.RESOURCE_GROUP
    if setting is None:
        head, colon, _ = resource.partition(":")
        return head if colon else ""
    try:
        group = group_function(setting)(resource)
    except Exception:
        # Metrics and traces are told after the lock operation committed, from
        # its caller's thread: a broken label function must not make it fail.
        logger.exception("DLOCK_RESOURCE_GROUP failed for a resource; its group is ''")
        return ""
    return group if isinstance(group, str) else ""


def group_function(setting: str | Callable[[str], str]) -> Callable[[str], str]:
    """The function ``DLOCK_RESOURCE_GROUP`` names (ImportError when it names none)."""
    if callable(setting):
        return setting
    return _imported(setting)


@cache
def _imported(path: str) -> Callable[[str], str]:
    function: Callable[[str], str] = import_string(path)
    return function


def lock_kind(
    lock: Any = None, *, mode: str | None = None, limit: int | None = None, **signal: Any
) -> str:
    """``exclusive``, ``shared`` or ``semaphore``: of a signal's hold (its
    ``mode`` and ``limit``), or of the ``mode`` and ``limit`` a signal names
    (``lock_kind(**kwargs)`` in a receiver; the other arguments are ignored)."""
    if lock is not None:
        mode, limit = getattr(lock, "mode", None), getattr(lock, "limit", None)
    if limit is not None:
        return SEMAPHORE
    return SHARED if mode == SHARED else EXCLUSIVE
