"""A refusal's reason comes with the refused acquisition (``Refusal``): neither
the API's ``"acquired": false`` answer nor ``lock()``'s ``LockNotAcquired``
(nor a refused upgrade, nor the API's answer to a release that left holds)
reads the lock again to say why. Each sends the statements of its
acquisition and nothing more (before: the API read the holders and the
lock-delay, and the database's now, after its take; ``lock()`` read the
lock-delay)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_dlock import LockNotAcquired, lock
from django_dlock.backends import backend_for
from django_dlock.models import DistributedLock
from django_dlock.rules.claim import EXCLUSIVE_KIND, claim_for
from django_dlock.service import Refusal
from django_dlock.signals import lock_refused
from tests.api_utils import CheckedClient, client_for, delete, post
from tests.utils import make_delayed_lock

pytestmark = pytest.mark.django_db(transaction=True)

# What a refused acquisition sends on each database: SQLite's take (an
# INSERT ... ON CONFLICT that writes nothing) and the SELECT of the row; PostgreSQL's short
# UPDATE (a lock-delay: then its full statement); MariaDB's one-row UPDATE and
# the SELECT of what it kept.
HELD = {"sqlite": 2, "postgresql": 1, "mysql": 2}


def statements(run: Callable[[], Any]) -> list[str]:
    """The lock statements ``run()`` sends (an API client's token lookup aside)."""
    with CaptureQueriesContext(connections["default"]) as queries:
        run()
    return [query["sql"] for query in queries if "authtoken" not in query["sql"]]


def take_alone() -> list[str]:
    """The statements of the refused acquisition itself, sent to the backend."""

    def take() -> None:
        refused = backend_for("default").take(claim_for("report", "someone-else", 5))
        assert refused.row is None and isinstance(refused.refusal, Refusal)

    return statements(take)


@pytest.fixture
def api() -> CheckedClient:
    return client_for(User.objects.create_user("alice"))


def test_a_refused_api_acquire_sends_its_take_and_nothing_else(api: CheckedClient) -> None:
    post(api, "/api/locks/report", {"owner": "a", "ttl": 30})
    take_alone()  # MariaDB prepares a statement on its third run: from here on, as below
    sent = statements(lambda: post(api, "/api/locks/report", {"owner": "b", "ttl": 5}))
    assert len(sent) == len(take_alone())
    if connections["default"].vendor in HELD and not _portable():
        assert len(sent) == HELD[connections["default"].vendor]


def test_a_refused_lock_try_sends_its_take_and_nothing_else() -> None:
    DistributedLock.objects.acquire("report", owner="a", ttl=30)
    take_alone()

    def refused() -> None:
        with pytest.raises(LockNotAcquired, match="held by another owner"), lock("report"):
            pass

    sent = statements(refused)
    assert len(sent) == len(take_alone())
    if connections["default"].vendor in HELD and not _portable():
        assert len(sent) == HELD[connections["default"].vendor]


def test_a_lock_delay_refusal_says_so_from_its_take(api: CheckedClient) -> None:
    make_delayed_lock("report", force=True)
    take_alone()
    response = None

    def acquire() -> None:
        nonlocal response
        response = post(api, "/api/locks/report", {"owner": "b", "ttl": 5})

    sent = statements(acquire)
    assert len(sent) == len(take_alone())
    assert response is not None and response.json()["acquired"] is False
    assert 25 <= int(response["Retry-After"]) <= 30  # the delay's end, not the holder's expiry

    def refused() -> None:
        with pytest.raises(LockNotAcquired, match="lock-delay for another"), lock("report"):
            pass

    assert len(statements(refused)) == len(take_alone())


def _portable() -> bool:
    """PostgreSQL with server-side binding runs the portable operation."""
    backend = backend_for("default")
    return backend.vendor == "postgresql" and not backend.features.one_statement


def test_each_refusal_sends_lock_refused_once(api: CheckedClient) -> None:
    """From the operation layer only (``LockService.try_take``): once per
    refused ``acquire()``, API acquire and ``lock()`` try; a wait's tries send
    none (its end is ``lock_wait_ended``)."""
    heard: list[dict[str, Any]] = []

    def receiver(sender: type, **kwargs: Any) -> None:
        heard.append(kwargs)

    DistributedLock.objects.acquire("report", owner="a", ttl=30)
    lock_refused.connect(receiver)
    try:
        assert DistributedLock.objects.acquire("report", owner="b") is None
        assert post(api, "/api/locks/report", {"owner": "c"}).json()["acquired"] is False
        with pytest.raises(LockNotAcquired), lock("report", owner="d"):
            pass
        with pytest.raises(LockNotAcquired), lock("report", owner="e", timeout=0.3):
            pass
    finally:
        lock_refused.disconnect(receiver)
    assert [(kwargs["owner"], kwargs["mode"]) for kwargs in heard] == [
        ("b", "exclusive"),
        ("c", "exclusive"),
        ("d", "exclusive"),
    ]


def test_a_refused_upgrade_sends_its_take_and_nothing_else() -> None:
    """The refusal says the reader's own grant still holds (``Refusal.grant_held``):
    refused beside another reader, not lost; no read of the holders after it."""
    DistributedLock.objects.acquire("report", owner="other", ttl=30, shared=True)
    with lock("report", shared=True) as held:
        claim = claim_for(
            "report", held.owner, 30, kind=EXCLUSIVE_KIND, held_token=held.fencing_token
        )

        def take() -> None:
            assert backend_for("default").take(claim).refusal.grant_held

        for _ in range(3):  # MariaDB prepares a statement on its third run
            take()

        def upgrade() -> None:
            with pytest.raises(LockNotAcquired, match="other holders share it"):
                held.upgrade()

        assert len(statements(upgrade)) == len(statements(take))
        assert not held.lost.is_set()


def test_a_release_that_leaves_holds_answers_them_from_the_release(api: CheckedClient) -> None:
    for _ in range(6):
        DistributedLock.objects.acquire("report", owner="a", ttl=30, reentrant=True)
    for _ in range(3):  # MariaDB prepares a statement on its third run
        DistributedLock.objects.release("report", "a")
    alone = statements(lambda: DistributedLock.objects.release("report", "a"))
    answers = []
    sent = statements(lambda: answers.append(delete(api, "/api/locks/report", {"owner": "a"})))
    assert len(sent) == len(alone)
    assert answers[0].status_code == 200 and answers[0].json()["hold_count"] == 1
