"""The shortcuts of the manager's acquire and release (the client's CPU per
lock operation) change nothing a caller can tell: the same checks and
messages, the ttls as the settings are now, the same instances and signals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import pre_init
from django.utils.connection import ConnectionDoesNotExist

from django_dlock.backends import backend_for, backend_of_alias
from django_dlock.exceptions import InvalidArgument
from django_dlock.instances import attnames, from_db
from django_dlock.models import DistributedLock, FencingFloor, LockHold
from django_dlock.rules import duration_of

pytestmark = pytest.mark.django_db

Locks = DistributedLock.objects


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"label": None}, "A label must be a string."),
        ({"label": "a\nb"}, "A label may not contain control characters"),
        ({"lock_delay": -1}, "A lock_delay must be at least 0"),
        ({"limit": 0}, "A limit must be a whole number of permits"),
        ({"shared": True, "lock_delay": 5}, "A lock_delay is for one resource held exclusively"),
        ({"ttl": True}, "A ttl must be a number of seconds."),
    ],
)
def test_an_acquire_with_more_than_a_resource_and_an_owner_is_checked(
    arguments: dict[str, Any], message: str
) -> None:
    Locks.acquire("hot:1", owner="a", ttl=1)  # a ttl of 1 known: True is no 1
    Locks.release("hot:1", owner="a")
    with pytest.raises(InvalidArgument) as error:
        Locks.acquire("hot:2", owner="a", **{"ttl": 30, **arguments})
    assert str(error.value).startswith(message)
    assert not Locks.filter(resource="hot:2").exists()


@pytest.mark.parametrize(
    ("owner", "valid"),
    [
        ("django-dlock:shared-holders", False),
        ("django-dlock:shared-holders 7", False),
        ("django-dlock:shared-holdersX", True),
        ("web 3 pid 4121", True),
        ("ünïcødé", True),
        ("tab\there", True),
    ],
)
def test_an_owner_is_checked_as_ever(owner: str, valid: bool) -> None:
    if valid:
        assert Locks.acquire("hot:owner", owner=owner, ttl=30) is not None
        assert Locks.release("hot:owner", owner=owner).value == "released"
    else:
        with pytest.raises(InvalidArgument, match="is reserved"):
            Locks.acquire("hot:owner", owner=owner, ttl=30)
        with pytest.raises(InvalidArgument, match="is reserved"):
            Locks.release("hot:owner", owner=owner)


def test_a_ttl_is_checked_by_the_settings_as_they_are_now(settings: Any) -> None:
    assert duration_of(100) == timedelta(seconds=100)
    assert duration_of(None) == timedelta(seconds=60)
    settings.DLOCK_MAX_TTL = 50
    with pytest.raises(InvalidArgument, match="at most 50 seconds"):
        duration_of(100)
    settings.DLOCK_DEFAULT_TTL = 5
    held = Locks.acquire("hot:ttl", owner="a")
    assert held is not None and held.expires_at - held.acquired_at == timedelta(seconds=5)
    assert duration_of(1e-7) == timedelta(milliseconds=1)


def test_the_backend_of_an_alias_is_backend_for_s() -> None:
    assert backend_of_alias(connection.alias) is backend_for(connection.alias)
    assert backend_of_alias(connection.alias) is backend_of_alias(connection.alias)
    with pytest.raises(ConnectionDoesNotExist):
        backend_of_alias("no-such-alias")


@pytest.mark.parametrize("model", [DistributedLock, LockHold])
def test_values_in_another_order_make_the_same_instance(model: Any) -> None:
    names = attnames(model)
    values = {name: f"v{n}" for n, name in enumerate(names)}
    in_order = from_db(model, "default", values)
    reversed_values = dict(reversed(values.items()))
    made = from_db(model, "default", reversed_values)
    expected = model.from_db("default", names, [values[name] for name in names])
    assert list(vars(made)) == list(vars(in_order)) == list(vars(expected))
    assert {name: getattr(made, name) for name in names} == values


def test_an_init_receiver_of_another_model_leaves_the_hold_as_it_was() -> None:
    seen: list[object] = []

    def made(sender: Any, **kwargs: Any) -> None:
        seen.append(sender)

    pre_init.connect(made, sender=FencingFloor)
    try:
        held = Locks.acquire("hot:init", owner="a", ttl=30)
    finally:
        pre_init.disconnect(made, sender=FencingFloor)
    assert held is not None and held.resource == "hot:init" and seen == []
    pre_init.connect(made, sender=DistributedLock)
    try:
        assert Locks.acquire("hot:init", owner="a", ttl=30) is not None
    finally:
        pre_init.disconnect(made, sender=DistributedLock)
    assert seen == [DistributedLock]
