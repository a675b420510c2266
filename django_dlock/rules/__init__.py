"""The rules of holding a lock that every layer shares: who is the owner, how
long a ttl lasts, and what a release can answer. The manager, the backends and
``lock()`` import them from here (and nothing else of each other's)."""

from __future__ import annotations

import enum
import secrets
from datetime import datetime, timedelta
from typing import Protocol

from django_dlock.conf import conf
from django_dlock.validators import RESERVED_OWNER, validate_ttl

__all__ = [
    "EXCLUSIVE",
    "SHARED",
    "Hold",
    "SHARED_HOLDERS",
    "SHORTEST_TTL",
    "ReleaseResult",
    "duration_of",
    "kind_of",
    "new_owner_token",
    "same_owner",
]


class ReleaseResult(enum.Enum):
    """What ``DistributedLock.objects.release()`` did."""

    RELEASED = "released"
    DECREMENTED = "decremented"  # a reentrant hold lost one of its holds; others remain
    NOT_FOUND = "not_found"  # no lock, or it had expired or been released already
    FORBIDDEN = "forbidden"  # another owner holds it


# A hold's mode.
EXCLUSIVE = "exclusive"
SHARED = "shared"

# The owner of a resource's row (``distributed_locks``) while its holders are
# shared ones (readers or a semaphore's permits), each a row of
# ``distributed_lock_holds``: the row stays held, until the last of them
# expires, for every process that reads only that row (the exclusive lock, and
# processes of the previous version during a rolling upgrade). No caller may
# use it as an owner (``validate_owner``).
SHARED_HOLDERS = RESERVED_OWNER


def kind_of(limit: int | None) -> str:
    """The kind of lock a resource is while it has holders: ``"lock"`` (an
    exclusive holder or readers), or a semaphore of ``limit`` permits."""
    return "lock" if limit is None else f"semaphore of {limit}"


def new_owner_token() -> str:
    """A random 128-bit owner token, for callers that name no owner."""
    return secrets.token_hex(16)


def same_owner(held_by: str, owner: str) -> bool:
    """Whether ``owner`` is ``held_by``, compared in constant time: an owner
    token is a secret, and its prefix must not leak through timing."""
    return secrets.compare_digest(held_by.encode(), owner.encode())


# SQLite's clock counts milliseconds: a shorter lock would expire as it is made.
SHORTEST_TTL = 0.001


def duration_of(ttl: float | None) -> timedelta:
    """How long a lock taken for ``ttl`` seconds (``None``: the default) lasts."""
    # An int or a float (not a bool, which a dict takes for 1 or 0) is looked
    # up among those checked already: a check and a timedelta cost a client's
    # acquisition 2% of its CPU, and each caller asks for few ttls.
    durations = conf.durations  # (forgotten with the settings they were checked by)
    kept = ttl is None or type(ttl) is float or type(ttl) is int
    if kept:
        duration = durations.get(ttl)
        if duration is not None:
            return duration
    seconds = validate_ttl(conf.DEFAULT_TTL if ttl is None else ttl)
    duration = timedelta(seconds=max(seconds, SHORTEST_TTL))
    if kept and len(durations) < 64:
        durations[ttl] = duration
    return duration


class Hold(Protocol):
    """What an acquisition returns: the ``DistributedLock`` of its exclusive
    holder, or a ``LockHold`` (a reader, or a semaphore's permit)."""

    @property
    def resource(self) -> str: ...

    @property
    def owner(self) -> str: ...

    @property
    def fencing_token(self) -> int: ...

    @property
    def acquired_at(self) -> datetime: ...

    @property
    def expires_at(self) -> datetime: ...

    @property
    def hold_count(self) -> int: ...

    @property
    def label(self) -> str: ...

    @property
    def limit(self) -> int | None: ...

    @property
    def mode(self) -> str: ...
