"""The labels that metrics and traces give a lock: its kind and its resource
group. Never its whole resource name (Prometheus keeps a time series per label
value, and names like ``order:1234`` are unbounded) and never its owner (a
secret: knowing it is the right to release).

Groups are bounded. By default a group is the part of a name before its first
":", and a process labels with at most ``GROUP_LIMIT`` distinct groups (the same
cap as a ``DLOCK_RESOURCE_GROUP`` function's): further new ones are ``other``.
``DLOCK_RESOURCE_GROUPS`` declares the groups instead, and every other prefix is
``other``. A client of the HTTP API chooses resource names, so without a bound it
would choose how many series the metrics store keeps, and copy its words into it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

from django.utils.module_loading import import_string

from django_dlock.conf import conf

__all__ = [
    "GROUP_LIMIT",
    "OTHER",
    "declared_groups",
    "group_function",
    "lock_kind",
    "resource_group",
]

logger = logging.getLogger("django_dlock")

EXCLUSIVE, SHARED, SEMAPHORE = "exclusive", "shared", "semaphore"

#: The group of a resource whose prefix ``DLOCK_RESOURCE_GROUPS`` does not declare,
#: and of every new group once a process has labelled with ``GROUP_LIMIT`` of them.
OTHER = "other"
#: How many distinct groups one process labels with (besides "" and ``OTHER``).
GROUP_LIMIT = 100


def resource_group(resource: str) -> str:
    """The group metrics and traces label ``resource`` with: ``DLOCK_RESOURCE_GROUP(resource)``
    when that is set; by default the part of the name before its first ":"
    (``job:42`` is in group ``job``), and "" for a name without ":". When
    ``DLOCK_RESOURCE_GROUPS`` lists groups, a prefix it does not list is
    ``OTHER``. A function that fails or answers something else than a string
    gives "". Past ``GROUP_LIMIT`` distinct groups of a function or of the
    default in this process, a new one is ``OTHER``."""
    setting = conf.RESOURCE_GROUP
    if setting is None:
        head, colon, _ = resource.partition(":")
        if not colon:
            return ""
        declared = declared_groups()
        if declared is None:
            return _seen.admit(head)
        return head if head in declared else OTHER
    try:
        group = group_function(setting)(resource)
    except Exception:
        # Metrics and traces are told after the lock operation committed, from
        # its caller's thread: a broken label function must not make it fail.
        logger.exception("DLOCK_RESOURCE_GROUP failed for a resource; its group is ''")
        return ""
    if not isinstance(group, str):
        return ""
    return _seen.admit(group)


def declared_groups() -> frozenset[str] | None:
    """The group names ``DLOCK_RESOURCE_GROUPS`` declares, or None when it is not
    set (check E502 reports a wrong value; here a value that is neither None nor
    a list of names declares none)."""
    setting = conf.RESOURCE_GROUPS
    if setting is None:
        return None
    if isinstance(setting, str | bytes) or not isinstance(setting, list | tuple | set | frozenset):
        return frozenset()
    return frozenset(name for name in setting if isinstance(name, str))


class _SeenGroups:
    """The groups this process has labelled with, up to ``GROUP_LIMIT``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[str] = set()
        self._warned = False

    def admit(self, group: str) -> str:
        """``group``, or ``OTHER`` when it would be one group too many."""
        if group in ("", OTHER) or group in self._groups:
            return group
        with self._lock:
            if group in self._groups or len(self._groups) < GROUP_LIMIT:
                self._groups.add(group)
                return group
            warn, self._warned = not self._warned, True
        if warn:
            logger.warning(
                "django-dlock has labelled metrics and traces with %d resource groups in this "
                "process; further new groups are labelled %r. List the groups to tell apart in "
                "DLOCK_RESOURCE_GROUPS, or make DLOCK_RESOURCE_GROUP (when set) return fewer "
                "distinct values.",
                GROUP_LIMIT,
                OTHER,
            )
        return OTHER

    def clear(self) -> None:
        """Forget every group (for tests)."""
        with self._lock:
            self._groups.clear()
            self._warned = False


_seen = _SeenGroups()


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
