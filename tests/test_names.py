"""Lock names from a call's arguments (``django_dlock.locking.names``), ``lock()`` used as a
decorator with them, and ``DistributedLock.objects.expires_in``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import connections

from django_dlock import LockNotAcquired, lock
from django_dlock.locking.names import ResourceName
from django_dlock.models import DistributedLock
from tests.utils import make_lock

Locks = DistributedLock.objects


def held_now() -> list[str]:
    return list(Locks.active().values_list("resource", flat=True))


# -- ResourceName --------------------------------------------------------------------------


def test_placeholders_are_filled_by_name_with_defaults_attributes_and_specs() -> None:
    def export(kind: str, year: int = 2026, *, order: Any = None) -> None: ...

    assert ResourceName("export:{kind}-{year}", export).format(("csv",), {}) == "export:csv-2026"
    assert ResourceName("export:{kind}", export).format((), {"kind": "json"}) == "export:json"
    name = ResourceName("order:{order.pk}:{year:05d}", export)
    assert name.format(("x",), {"order": SimpleNamespace(pk=7)}) == "order:7:02026"


def test_doubled_braces_are_literal() -> None:
    def f(a: int) -> None: ...

    assert ResourceName("set:{{{a}}}", f).format((1,), {}) == "set:{1}"
    assert ResourceName("literal:{{a}}", f).format((1,), {}) == "literal:{a}"


def test_a_placeholder_that_names_no_parameter_is_refused_when_decorating() -> None:
    def ship(order: int) -> None: ...

    with pytest.raises(ValueError, match=r"\{order_id\}.*no parameter 'order_id'"):
        ResourceName("order:{order_id}", ship)
    with pytest.raises(ValueError, match="names a parameter"):
        ResourceName("order:{}", ship)
    with pytest.raises(ValueError, match="names a parameter"):
        ResourceName("order:{0}", ship)
    with pytest.raises(ValueError, match="not a valid template"):
        ResourceName("order:{order", ship)
    with pytest.raises(ValueError, match=r"\*orders"):
        ResourceName("order:{orders}", lambda *orders: None)


def test_keyword_arguments_fill_placeholders_when_the_function_takes_any() -> None:
    def handler(**kwargs: Any) -> None: ...

    name = ResourceName("event:{kind}", handler)
    assert name.format((), {"kind": "paid"}) == "event:paid"
    with pytest.raises(TypeError, match="no argument 'kind'"):
        name.format((), {"other": 1})


def test_a_function_key_gets_the_arguments() -> None:
    def ship(order_id: int) -> None: ...

    assert ResourceName(lambda order_id: f"o:{order_id}", ship).format((3,), {}) == "o:3"


def test_injected_parameters_cannot_be_placeholders() -> None:
    def ship(order_id: int, fencing_token: int) -> None: ...

    with pytest.raises(ValueError, match="fencing_token"):
        ResourceName("o:{fencing_token}", ship, injected={"fencing_token"})


# -- lock() as a decorator -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_lock_as_a_decorator_locks_the_name_formatted_from_each_call() -> None:
    @lock("order:{order_id}", ttl=30)
    def ship(order_id: int, note: str = "") -> list[str]:
        return held_now()

    assert ship(42) == ["order:42"]
    assert ship(order_id=7, note="x") == ["order:7"]
    assert held_now() == []


@pytest.mark.django_db(transaction=True)
def test_two_calls_with_different_arguments_hold_different_locks() -> None:
    @lock("order:{order_id}", ttl=30)
    def ship(order_id: int) -> list[str]:
        return held_now()

    Locks.acquire("order:1", "someone-else", ttl=60)
    assert sorted(ship(2)) == ["order:1", "order:2"]
    with pytest.raises(LockNotAcquired, match="order:1"):
        ship(1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_lock_as_an_async_decorator_formats_too() -> None:
    @lock("report:{month}", ttl=30)
    async def build(month: str) -> bool:
        return await Locks.active().filter(resource=f"report:{month}").aexists()

    try:
        assert await build("2026-05") is True
    finally:
        # The ORM's async calls ran in asgiref's thread: its connection must not
        # outlive the test database.
        await sync_to_async(connections.close_all)()


def test_lock_as_a_decorator_refuses_a_placeholder_without_a_parameter() -> None:
    with pytest.raises(ValueError, match="order_id"):

        @lock("order:{order_id}")
        def ship(order: int) -> None: ...


@pytest.mark.django_db(transaction=True)
def test_a_formatted_name_that_is_no_valid_resource_is_refused() -> None:
    @lock("note:{text}")
    def note(text: str) -> None: ...

    with pytest.raises(ValidationError):
        note("has space")
    assert held_now() == []


@pytest.mark.django_db(transaction=True)
def test_a_resource_without_placeholders_is_kept_and_doubled_braces_undone() -> None:
    @lock("plain:{{x}}")
    def plain() -> list[str]:
        return held_now()

    assert plain() == ["plain:{x}"]
    with lock("plain:{{x}}") as held:  # the context manager takes the name as it is
        assert held.resource == "plain:{{x}}"


# -- expires_in ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_expires_in_is_the_holders_time_left_on_the_database_clock() -> None:
    assert Locks.expires_in("job:1") is None  # never locked
    make_lock("job:1", expires_in=42)
    left = Locks.expires_in("job:1")
    assert left is not None and 40 < left <= 42
    make_lock("job:2", expires_in=-5)
    assert Locks.expires_in("job:2") is None  # expired: nobody holds it
    lock_3 = Locks.acquire("job:3", "w", ttl=60)
    assert lock_3 is not None
    Locks.release("job:3", "w")
    assert Locks.expires_in("job:3") is None  # released
    with pytest.raises(ValidationError):
        Locks.expires_in("bad name")
