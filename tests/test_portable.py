"""PostgreSQL's portable operations: what runs where the one-statement forms do
not apply (psycopg2, or ``server_side_binding``). The same promises hold; the
whole suite also runs this way in the ``portable`` nox session."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from django_dlock import lock, signals
from django_dlock.backends import backend_for
from django_dlock.models import DistributedLock, FencingFloor, ReleaseResult
from tests.utils import expire, wait_for

pytestmark = [pytest.mark.requires_postgres, pytest.mark.django_db(transaction=True)]

Locks = DistributedLock.objects


@pytest.fixture(autouse=True)
def portable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_for("default").features, "one_statement", False)


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """The SQL each lock operation sends from here on."""
    sent: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        yield sent


def test_every_operation_selects_for_update_decides_and_writes(statements: list[str]) -> None:
    first = Locks.acquire("port:1", owner="a", ttl=30)
    assert first is not None
    again = Locks.acquire("port:1", owner="a", ttl=60)
    assert again is not None and again.fencing_token == first.fencing_token
    assert again.acquired_at == first.acquired_at and again.expires_at > first.expires_at
    assert Locks.acquire("port:1", owner="b", ttl=30) is None
    renewed = Locks.renew("port:1", owner="a", ttl=90)
    assert renewed is not None and renewed.fencing_token == first.fencing_token
    assert Locks.renew("port:1", owner="b", ttl=30) is None
    assert Locks.release("port:1", owner="b") is ReleaseResult.FORBIDDEN
    assert Locks.release("port:1", owner="a") is ReleaseResult.RELEASED
    assert Locks.release("port:1", owner="a") is ReleaseResult.NOT_FOUND
    with pytest.raises(DistributedLock.DoesNotExist):
        Locks.renew("port:1", owner="a", ttl=30)
    taken = Locks.acquire("port:1", owner="b", ttl=30)
    assert taken is not None and taken.fencing_token == first.fencing_token + 1
    assert Locks.force_release("port:1") is True
    assert Locks.force_release("port:1") is False

    assert statements, "nothing was sent"
    assert not any("WITH locked AS" in sql for sql in statements)
    assert sum("FOR UPDATE" in sql for sql in statements) >= 12


def test_an_expired_lock_is_taken_over_with_a_larger_token() -> None:
    takeovers: list[dict[str, Any]] = []

    def taken_over(**kwargs: Any) -> None:
        takeovers.append(kwargs)

    signals.lock_taken_over.connect(taken_over)
    try:
        first = Locks.acquire("port:2", owner="a", ttl=30)
        assert first is not None
        expire("port:2")
        second = Locks.acquire("port:2", owner="b", ttl=30)
    finally:
        signals.lock_taken_over.disconnect(taken_over)
    assert second is not None and second.fencing_token == first.fencing_token + 1
    assert [kwargs["previous_owner"] for kwargs in takeovers] == ["a"]


def test_purge_keeps_the_tokens_counting() -> None:
    first = Locks.acquire("port:3", owner="a", ttl=30)
    assert first is not None
    Locks.release("port:3", owner="a")
    assert Locks.purge_expired() == 1
    assert FencingFloor.objects.get(pk=1).value == first.fencing_token
    again = Locks.acquire("port:3", owner="a", ttl=30)
    assert again is not None and again.fencing_token == first.fencing_token + 1


def test_a_release_wakes_the_head_of_the_queue_and_it_leaves_the_queue() -> None:
    Locks.acquire("port:4", owner="holder", ttl=30)
    got: list[int] = []

    def wait() -> None:
        try:
            with lock("port:4", ttl=30, timeout=20) as held:
                got.append(held.fencing_token)
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    from django_dlock.models import LockWaiter

    wait_for(
        lambda: LockWaiter.objects.filter(resource="port:4").exists(), what="the waiter queued"
    )
    assert Locks.release("port:4", owner="holder") is ReleaseResult.RELEASED
    waiter.join(10)
    assert len(got) == 1
    assert not LockWaiter.objects.filter(resource="port:4").exists()
