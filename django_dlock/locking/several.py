"""``lock([...])``: several resources at once, all or none.

Each try is one transaction that takes every lock or none, in the order of
their names (``LockService.take_all``): two callers asking for overlapping
sets in opposite orders never wait for each other in a circle, and
never hold a part each. A blocking ``lock([...])`` tries again after a backoff
with jitter until its timeout (it does not queue: a queued waiter would hold a
place in one queue while waiting for the others, which is what deadlocks).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from django_dlock.conf import conf
from django_dlock.exceptions import LockLost, LockNotAcquired
from django_dlock.locking.handle import LockHandle, report_lost
from django_dlock.locking.renewer import Renewer
from django_dlock.models import DistributedLock
from django_dlock.rules import ReleaseResult, new_owner_token
from django_dlock.rules.claim import claims_for
from django_dlock.service import service_for

if TYPE_CHECKING:
    from django_dlock.locking.handle import LockHandle as _Handle

__all__ = ["HeldLocks", "LockItems", "hold_several"]

#: A resource (exclusive), or ``(resource, "shared" | "exclusive")``.
LockItems = Sequence[str | tuple[str, str]]


class HeldLocks:
    """What ``with lock([...]) as held`` gives: a handle per resource, in the
    order asked (``held.handles``; ``held["name"]`` for one), each with its own
    fencing token. ``lost`` is set when any of them is lost; ``check()`` raises."""

    def __init__(self, handles: list[LockHandle], renewers: list[Renewer], using: str) -> None:
        self.handles = handles
        self.renewers = renewers
        self.using = using
        self.owner = handles[0].owner
        self.lost = _AnyLost(handles)
        self._results: list[ReleaseResult] = []

    def __getitem__(self, resource: str) -> LockHandle:
        for handle in self.handles:
            if handle.resource == resource:
                return handle
        raise KeyError(resource)

    def __repr__(self) -> str:
        return f"<HeldLocks {[handle.resource for handle in self.handles]!r}>"

    @property
    def resources(self) -> list[str]:
        """The resources, in the order asked."""
        return [handle.resource for handle in self.handles]

    @property
    def fencing_tokens(self) -> dict[str, int]:
        """Each resource's fencing token, by resource."""
        return {handle.resource: handle.fencing_token for handle in self.handles}

    def check(self) -> None:
        """Raise ``LockExpired`` if any of the locks was lost."""
        for handle in self.handles:
            handle.check()

    def release(self, *, failed: bool) -> None:
        """Release them together (one transaction); report any found lost."""
        self.release_quietly()
        self.report(failed=failed)

    def release_quietly(self) -> None:
        for renewer in self.renewers:
            renewer.stop()
        manager = DistributedLock.objects.db_manager(self.using)
        self._results = manager.release_all(self.resources, self.owner)

    def report(self, *, failed: bool) -> None:
        first_error: LockLost | None = None
        for handle, result in zip(self.handles, self._results, strict=True):
            if result is ReleaseResult.RELEASED:
                handle.mark_released()
                continue
            try:
                report_lost(handle, result, failed=failed)
            except LockLost as error:  # every one is marked lost before the first is raised
                first_error = first_error or error
        if first_error is not None:
            raise first_error


class Wanted(Protocol):
    """What ``hold_several`` needs of a ``lock()``."""

    using: str
    owner: str | None
    ttl: float
    timeout: float | None
    auto_renew: bool
    label: str
    on_lost: Callable[[_Handle], object] | None


def hold_several(context: Wanted, items: LockItems) -> HeldLocks:
    """Take every lock of ``items`` for ``context`` (a ``lock()``), waiting up
    to its timeout; ``LockNotAcquired`` when they stay held."""
    service = service_for(context.using)
    owner = context.owner or new_owner_token()
    claims = claims_for(items, owner, context.ttl, context.label)
    deadline = time.monotonic() + (context.timeout or 0.0)
    rng = random.Random()  # noqa: S311 - jitter, not a secret
    attempt = 0
    while True:
        started = time.monotonic()
        holds = service.take_all(claims)
        if holds is not None:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            names = ", ".join(repr(claim.resource) for claim in claims)
            raise LockNotAcquired(f"Could not acquire every lock of {names}: one was held.")
        window = min(conf.BACKOFF_MAX, conf.BACKOFF_BASE * 2**attempt)
        attempt = min(attempt + 1, 32)
        time.sleep(min(rng.uniform(0, window), remaining, threading.TIMEOUT_MAX))
    handles = [
        LockHandle(hold, context.ttl, context.using, started, on_lost=context.on_lost)
        for hold in holds
    ]
    renewers = [Renewer(handle) for handle in handles] if context.auto_renew else []
    for renewer in renewers:
        renewer.start()
    return HeldLocks(handles, renewers, context.using)


class _AnyLost:
    """``held.lost``: set when any of the handles' ``lost`` is."""

    def __init__(self, handles: list[LockHandle]) -> None:
        self._handles = handles

    def is_set(self) -> bool:
        return any(handle.lost.is_set() for handle in self._handles)

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            if end is not None and time.monotonic() >= end:
                return False
            self._handles[0].lost.wait(0.05)
        return True
