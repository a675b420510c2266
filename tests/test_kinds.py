"""``LockKind`` (django_dlock/kinds.py): the one table of kinds of hold, valid
and refused, checked once against the kind itself and against every way in:
``lock()`` and ``acquire()`` here, the HTTP API in test_api_kinds.py and
``manage.py dlock run`` in test_command_dlock.py, which import ``REFUSED``."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from django_dlock import InvalidArgument, LockKind, lock
from django_dlock.models import DistributedLock
from django_dlock.validators import MAX_LIMIT

LIMIT_MESSAGE = f"A limit must be a whole number of permits from 1 to {MAX_LIMIT}."

#: (the flags of lock() and acquire(), the kind they make).
VALID: list[tuple[dict[str, Any], LockKind]] = [
    ({}, LockKind.exclusive()),
    ({"reentrant": True}, LockKind.exclusive(reentrant=True)),
    ({"shared": True}, LockKind.shared_lock()),
    ({"shared": True, "reentrant": True}, LockKind.shared_lock(reentrant=True)),
    ({"limit": 4}, LockKind.semaphore(4)),
    ({"limit": 4, "shared": True}, LockKind.semaphore(4)),  # a semaphore's permits are shared
    ({"limit": 1, "reentrant": True}, LockKind.semaphore(1, reentrant=True)),
    ({"limit": MAX_LIMIT}, LockKind.semaphore(MAX_LIMIT)),
]

#: (the flags, the message every way in refuses them with).
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"limit": 0}, LIMIT_MESSAGE),
    ({"limit": -1}, LIMIT_MESSAGE),
    ({"limit": MAX_LIMIT + 1}, LIMIT_MESSAGE),
    ({"limit": True}, LIMIT_MESSAGE),
    ({"limit": 2.5}, LIMIT_MESSAGE),
    ({"limit": "3"}, LIMIT_MESSAGE),
]


@pytest.mark.parametrize(("flags", "kind"), VALID)
def test_the_flags_make_one_kind(flags: dict[str, Any], kind: LockKind) -> None:
    assert LockKind.from_flags(**flags) == kind
    assert kind.mode == ("shared" if kind.shared else "exclusive")
    assert kind.shared is (flags.get("shared", False) or "limit" in flags)


@pytest.mark.parametrize(("flags", "message"), REFUSED)
def test_a_refused_kind_is_an_invalid_argument(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument) as error:
        LockKind.from_flags(**flags)
    assert error.value.messages == [message]
    # Caught as the ValidationError it always was, and as Python's ValueError.
    assert isinstance(error.value, ValidationError) and isinstance(error.value, ValueError)
    with pytest.raises(InvalidArgument) as made:
        LockKind(**flags)  # made directly: checked the same
    assert made.value.messages == [message]


def test_a_kind_is_never_made_with_flags_that_are_not_booleans() -> None:
    with pytest.raises(InvalidArgument, match="shared must be True or False"):
        LockKind(shared="yes")  # type: ignore[arg-type]
    assert LockKind.from_flags(shared=1, reentrant=0) == LockKind.shared_lock()  # read as flags


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("flags", "kind"), VALID)
def test_acquire_holds_the_kind_it_asked_for(flags: dict[str, Any], kind: LockKind) -> None:
    hold = DistributedLock.objects.acquire("kind", owner="a", ttl=30, **flags)
    assert hold is not None
    assert (hold.mode, hold.limit) == (kind.mode, kind.limit)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("flags", "message"), REFUSED)
def test_lock_and_acquire_refuse_it_alike(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument) as by_lock:
        lock("kind", **flags)
    with pytest.raises(InvalidArgument) as by_acquire:
        DistributedLock.objects.acquire("kind", owner="a", ttl=30, **flags)
    assert by_lock.value.messages == by_acquire.value.messages == [message]
    assert not DistributedLock.objects.exists()
