"""The pieces the tables of lock cases share (``test_admission``,
``test_release_cases``): who holds a resource and who waits for it, built in
the database as the public calls and the waiter queue make them, and every
path a backend has for one operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest

from django_dlock.backends.base import LockBackend
from django_dlock.conf import conf
from django_dlock.kinds import LockKind
from django_dlock.models import DistributedLock, LockHold, LockWaiter
from django_dlock.rules.claim import Claim
from django_dlock.rules.clock import expired_before

Locks = DistributedLock.objects

TTL = timedelta(seconds=60)

# A server session id that no session has: a waiter whose connection is gone.
NO_SESSION = 2**31 - 1


@dataclass(frozen=True)
class Holder:
    """One holder of the resource when the operation comes."""

    owner: str
    shared: bool = False  # a reader; with a limit, a semaphore's permit
    limit: int | None = None
    holds: int = 1  # how many times it entered (reentrant)
    expired: bool = False  # its ttl ran out, and nobody released it
    delay: float | None = None  # its lock-delay (seconds), an exclusive holder's

    @property
    def exclusive(self) -> bool:
        return not self.shared and self.limit is None


def exclusive(
    owner: str = "a", *, holds: int = 1, expired: bool = False, delay: float | None = None
) -> Holder:
    return Holder(owner, holds=holds, expired=expired, delay=delay)


def reader(owner: str, *, holds: int = 1, expired: bool = False) -> Holder:
    return Holder(owner, shared=True, holds=holds, expired=expired)


def permit(owner: str, limit: int, *, expired: bool = False) -> Holder:
    return Holder(owner, shared=True, limit=limit, expired=expired)


A = exclusive("a")


@dataclass(frozen=True)
class Waiter:
    """A waiter of ``lock()`` in the resource's queue."""

    shared: bool = False
    limit: int | None = None
    live: bool = True  # False: its process is gone (the ticket no longer counts)
    listens: bool = False  # a release can reach it (a channel), rather than it polling
    has_ttl: bool = True  # False: its process predates the ttl column (it takes the lock itself)


WRITER = Waiter()
READER = Waiter(shared=True)
DEAD_WRITER = Waiter(live=False)


def permit_waiter(limit: int, *, listens: bool = False) -> Waiter:
    return Waiter(shared=True, limit=limit, listens=listens)


def label_of(holder: str) -> str:
    return f"held by {holder}"


@dataclass(frozen=True)
class Grants:
    """What the holders were granted: each one's token, and when its grant began."""

    tokens: dict[str, int]
    acquired: dict[str, datetime]

    @property
    def highest(self) -> int:
        """The largest token granted on the resource (0: none)."""
        return max(self.tokens.values(), default=0)


def hold(resource: str, held: tuple[Holder, ...], *, released: bool = False) -> Grants:
    """Make ``held`` the holders of ``resource`` (``released``: they released
    their holds, and the row stays), expired where they say so."""
    tokens: dict[str, int] = {}
    acquired: dict[str, datetime] = {}
    for holder in held:
        for _ in range(holder.holds):
            granted = Locks.acquire(
                resource,
                owner=holder.owner,
                ttl=TTL.total_seconds(),
                reentrant=True,
                shared=holder.shared,
                limit=holder.limit,
                label=label_of(holder.owner),
                lock_delay=holder.delay,
            )
            assert granted is not None, f"{holder} could not take its hold"
            tokens[holder.owner] = granted.fencing_token
            acquired[holder.owner] = granted.acquired_at
    if released:  # by an operator: a lock-delay runs from now
        assert Locks.force_release(resource)
    for holder in held:
        if holder.expired:  # as if its ttl had run out: nobody released it
            expire(resource, holder)
    if held and all(holder.expired for holder in held):
        Locks.filter(resource=resource).update(expires_at=expired_before(1))
    return Grants(tokens, acquired)


def expire(resource: str, holder: Holder) -> None:
    if holder.exclusive:
        Locks.filter(resource=resource).update(expires_at=expired_before(1))
    else:  # the resource's row stays held while another hold is valid
        holds = LockHold.objects.using(conf.DATABASE).filter(resource=resource, owner=holder.owner)
        holds.update(expires_at=expired_before(1))


def queue(
    backend: LockBackend, resource: str, waiter: Waiter, session: int | None, channel: str = ""
) -> tuple[int, str]:
    """Queue ``waiter`` as ``lock()`` does, listening on ``channel`` where it
    listens; its ticket and owner. A dead one's session is gone where the
    database can tell (PostgreSQL, MariaDB); elsewhere its listener's socket
    is gone (``gone(channel)``, nobody binds it) or, polling, its ticket ran out."""
    owner = f"waiter-{LockWaiter.objects.count()}"
    claim = Claim(
        resource=resource,
        owner=owner,
        duration=TTL,
        kind=LockKind(shared=waiter.shared, limit=waiter.limit),
    )
    if not waiter.listens:
        channel = ""
    elif not waiter.live:
        channel = gone(channel)
    pid = session if waiter.live or session is None else NO_SESSION
    ticket, _ = backend.queue.enqueue_waiter(
        claim, TTL.total_seconds(), channel=channel, listener_pid=pid
    )
    if not waiter.live and session is None and not waiter.listens:
        LockWaiter.objects.filter(pk=ticket).update(expires_at=expired_before(1))
    if not waiter.has_ttl:
        LockWaiter.objects.filter(pk=ticket).update(ttl=None)
    return ticket, owner


def gone(channel: str) -> str:
    """The channel of a listener of ``channel``'s kind whose process is gone."""
    return f"{channel}-gone"


def paths(backend: LockBackend, operation: str) -> dict[str, Callable[..., Any]]:
    """Every way this database carries out ``operation`` (a ``LockBackend``
    method's name): the portable one (``<operation>_portable``), and the
    vendor's own entry where
    it has them (PostgreSQL with psycopg 3's client-side binding, MariaDB),
    which hand it the cases they leave (``handed_over``)."""
    portable = getattr(LockBackend, f"{operation}_portable")
    found: dict[str, Callable[..., Any]] = {"portable": partial(portable, backend)}
    vendors = getattr(type(backend), operation) is not getattr(LockBackend, operation)
    if vendors and backend.features.one_statement:
        found[f"{backend.vendor} statements"] = getattr(backend, operation)
    return found


@contextmanager
def handed_over(monkeypatch: pytest.MonkeyPatch, operation: str) -> Iterator[list[object]]:
    """The calls of ``operation`` that a vendor's statements hand to the
    portable one meanwhile (the paths' own portable one is bound already)."""
    handed: list[object] = []
    portable = getattr(LockBackend, f"{operation}_portable")

    def spied(backend: LockBackend, *args: Any, **kwargs: Any) -> Any:
        handed.append(args)
        return portable(backend, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(LockBackend, f"{operation}_portable", spied)
        yield handed
