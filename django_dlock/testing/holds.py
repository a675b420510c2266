"""Locks held as another process would hold them: an owner that the code under
test does not know, so that it finds the lock taken and goes down its refused
or waiting path."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING

from django_dlock.models import DistributedLock, ReleaseResult

if TYPE_CHECKING:
    from django_dlock.managers import DistributedLockManager
    from django_dlock.rules import Hold

#: The label of a hold taken by the testing kit, unless the test gives one.
FOREIGN_LABEL = "dlock.testing"


def manager(using: str | None) -> DistributedLockManager[DistributedLock]:
    """The lock manager on ``using`` (``None``: ``DLOCK_DATABASE``)."""
    if using is None:
        return DistributedLock.objects
    return DistributedLock.objects.db_manager(using)


@dataclass
class ForeignHold:
    """A lock the testing kit holds under an owner of its own (``owner``, a
    random token no other code knows). ``hold`` is what ``acquire()``
    returned. As a context manager it releases the lock on exit."""

    resource: str
    owner: str
    hold: Hold
    using: str | None = None
    released: bool = field(default=False, init=False)

    @property
    def fencing_token(self) -> int:
        return self.hold.fencing_token

    def release(self) -> ReleaseResult:
        """Give the lock up, as its owner would. Releasing twice is harmless:
        ``NOT_FOUND`` or ``FORBIDDEN`` (someone took it over meanwhile)."""
        self.released = True
        return manager(self.using).release(self.resource, self.owner)

    def __enter__(self) -> ForeignHold:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def take_foreign(
    resource: str,
    *,
    ttl: float = 60,
    shared: bool = False,
    limit: int | None = None,
    label: str = FOREIGN_LABEL,
    using: str | None = None,
) -> ForeignHold:
    """Acquire ``resource`` for a new foreign owner; ``AssertionError`` when the
    lock cannot be taken (someone holds it in a way that excludes this hold):
    a test that meant to hold it would otherwise go on with nothing held."""
    owner = f"dlock-testing-{secrets.token_hex(8)}"
    hold = manager(using).acquire(resource, owner, ttl, shared=shared, limit=limit, label=label)
    if hold is None:
        raise AssertionError(
            f"The testing kit could not hold {resource!r}: it is held already "
            f"({describe_holders(resource, using)})."
        )
    return ForeignHold(resource, owner, hold, using)


def describe_holders(resource: str, using: str | None) -> str:
    """Who holds ``resource``, by label and token, for a failure message (never the owner)."""
    holds = manager(using).holders(resource)
    if not holds:
        return "no valid holder"
    return ", ".join(
        f"{hold.mode} hold, token {hold.fencing_token}, label {hold.label!r}" for hold in holds
    )
