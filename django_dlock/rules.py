"""The rules of holding a lock that every layer shares: who is the owner, how
long a ttl lasts, and what a release can answer. The manager, the backends and
``lock()`` import them from here (and nothing else of each other's)."""

from __future__ import annotations

import enum
import secrets
from datetime import timedelta

from django_dlock.conf import conf
from django_dlock.validators import validate_ttl

__all__ = ["SHORTEST_TTL", "ReleaseResult", "duration_of", "new_owner_token", "same_owner"]


class ReleaseResult(enum.Enum):
    """What ``DistributedLock.objects.release()`` did."""

    RELEASED = "released"
    NOT_FOUND = "not_found"  # no lock, or it had expired or been released already
    FORBIDDEN = "forbidden"  # another owner holds it


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
    seconds = validate_ttl(conf.DEFAULT_TTL if ttl is None else ttl)
    return timedelta(seconds=max(seconds, SHORTEST_TTL))
