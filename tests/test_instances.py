"""The hold an acquisition returns, and the one a signal's receiver gets, is
the model instance ``from_db()`` makes, whichever way ``instances.from_db``
made it."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.db.models.signals import post_init

from django_dlock.instances import attnames, from_db, plain
from django_dlock.models import DistributedLock, LockHold
from django_dlock.signals import lock_released

pytestmark = pytest.mark.django_db

Locks = DistributedLock.objects


def values_of(instance: Any) -> dict[str, object]:
    model: type[Model] = type(instance)
    return {name: getattr(instance, name) for name in attnames(model)}


@pytest.mark.parametrize("model", [DistributedLock, LockHold])
def test_the_direct_instance_is_the_one_from_db_makes(model: Any) -> None:
    assert plain(model)
    names = attnames(model)
    values = {name: f"v{n}" for n, name in enumerate(names)}
    made = from_db(model, "default", values)
    expected = model.from_db("default", names, [values[name] for name in names])
    assert type(made) is model
    assert values_of(made) == values_of(expected) == values
    assert (made._state.adding, made._state.db) == (False, "default")
    assert made._state.fields_cache == {}


def test_an_acquired_lock_reads_as_the_row_it_is() -> None:
    held = Locks.acquire("inst:1", owner="a", ttl=30)
    assert held is not None
    assert values_of(held) == values_of(Locks.get(resource="inst:1"))
    assert held._state.db == connection.alias and not held._state.adding
    held.refresh_from_db()  # a model instance like any other
    assert held.owner == "a"


def test_a_post_init_receiver_still_sees_every_hold_made() -> None:
    seen: list[str] = []

    def made(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance.resource)

    def released(sender: Any, lock: Any, **kwargs: Any) -> None:
        seen.append(f"released {lock.resource}")

    post_init.connect(made, sender=DistributedLock)
    lock_released.connect(released)
    try:
        Locks.acquire("inst:2", owner="a", ttl=30)
        Locks.release("inst:2", owner="a")
    finally:
        post_init.disconnect(made, sender=DistributedLock)
        lock_released.disconnect(released)
    assert seen == ["inst:2", "inst:2", "released inst:2"]
