"""The listener's thread, without a database: a fake connection whose close the
test holds, to stand in the moment when an idle listener's thread ends just as
a new waiter arrives (``Listener._done``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from django_dlock.listeners import base
from django_dlock.listeners.base import Listener
from django_dlock.locking.wakeup import Wakeup
from django_dlock.rules.notice import GrantNotice


class FakeListener(Listener[int]):
    """Each connection is a number, which stands for its server process too."""

    def __init__(self) -> None:
        super().__init__("default")
        self.closing = threading.Event()  # a close has begun
        self.may_close = threading.Event()  # the test lets it end
        self.may_close.set()
        self.may_connect = threading.Event()  # the test lets a reconnection through
        self.may_connect.set()

    def _connect(self) -> int:
        assert self.may_connect.wait(10)
        self.connects += 1
        self.backend_pid = self.connects
        return self.connects

    def _subscribe(self, connection: int) -> None:
        pass

    def _receive(self, connection: int) -> None:
        with self._lock:
            self._lock.wait(0.01)

    def _close(self, connection: int) -> None:
        self.closing.set()
        assert self.may_close.wait(10)


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeListener]:
    monkeypatch.setattr(base, "LINGER", 0.0)  # idle at once
    listener = FakeListener()
    yield listener
    listener.may_close.set()
    listener.stop()


def test_a_waiter_that_comes_as_an_idle_listener_closes_waits_for_the_next_one(
    listener: FakeListener,
) -> None:
    first = listener.watch(Wakeup())
    assert first.listening(5) and listener.backend_pid == 1
    ending = listener._thread
    assert ending is not None
    listener.may_close.clear()
    listener.may_connect.clear()
    first.close()  # idle: the thread ends, and closes its connection ...
    assert listener.closing.wait(5)  # ... which the test holds half-closed
    # A waiter that comes now starts the next thread (held before it connects),
    # and is not told that a release would reach it: it would queue with a
    # channel nobody hears, naming a server process about to end.
    second = listener.watch(Wakeup())
    assert not second.listening() and listener.backend_pid is None
    listener.may_connect.set()
    assert second.listening(5) and listener.backend_pid == 2
    # The ending thread finishes closing: the next one's state stays.
    listener.may_close.set()
    ending.join(5)
    assert not ending.is_alive()
    assert second.listening() and listener.backend_pid == 2
    second.close()


def _grant(token: int) -> GrantNotice:
    now = datetime.now(UTC)
    return GrantNotice(pk=1, fencing_token=token, acquired_at=now, expires_at=now)


def test_a_grant_is_taken_only_for_the_ticket_it_named(listener: FakeListener) -> None:
    watch = listener.watch(Wakeup())
    watch.claim(7)
    listener._dispatch(_grant(41).payload(7))
    # The waiter left ticket 7 unused (say its grant was revoked) and queued
    # again: the grant for 7 is not one for its new ticket.
    watch.claim(8)
    assert watch.take_notice(8) is None
    listener._dispatch(_grant(42).payload(8))
    listener._dispatch("8")  # a later plain wake-up of the same ticket keeps the grant
    told = watch.take_notice(8)
    assert told is not None and told.fencing_token == 42
    assert watch.take_notice(8) is None  # once
    watch.close()
