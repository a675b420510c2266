"""What Celery's and Django's task integrations share (``django_dlock.contrib.task_locks``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_dlock.contrib.task_locks import backoff, owner_for_task
from django_dlock.exceptions import LockNotAcquired
from django_dlock.locking import lock
from django_dlock.models import DistributedLock

Locks = DistributedLock.objects


@pytest.mark.django_db(transaction=True, databases=["default", "locks"])
def test_the_retry_backoff_stops_at_the_holders_expiry_as_the_refusal_found_it(
    settings: Any,
) -> None:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    settings.DLOCK_DATABASE = "locks"  # a second connection to the same database
    Locks.db_manager("locks").acquire("report:db", "holder", ttl=60)
    refusals = []
    for timeout in (None, 0.05):  # one try, and a wait that timed out
        with pytest.raises(LockNotAcquired) as refused, lock("report:db", timeout=timeout):
            pass  # pragma: no cover - refused
        refusals.append(refused.value)
    for error in refusals:
        with (
            CaptureQueriesContext(connections["default"]) as on_default,
            CaptureQueriesContext(connections["locks"]) as on_locks,
        ):
            first = backoff(0, 1.0, error)
        assert (len(on_default), len(on_locks)) == (0, 0)  # nothing read again
        assert 0.5 <= first <= 1.0  # half to all of the base, never the holder's 60 s
        assert 4 <= backoff(3, 1.0, error) <= 8
        assert 55 < backoff(10, 1.0, error) <= 60.1  # capped just past the holder's expiry
    assert backoff(5, 1.0, LockNotAcquired("found free")) == 0.0  # free: at once


def test_the_owner_of_a_task_is_the_same_for_one_task_id_and_secret() -> None:
    owner = owner_for_task("4f1c", "report:2026-05")
    assert owner == owner_for_task("4f1c", "report:2026-05")  # a redelivery: the same
    assert owner != owner_for_task("4f1d", "report:2026-05")
    assert owner != owner_for_task("4f1c", "report:2026-06")
    assert "4f1c" not in owner and len(owner) == 32
    with override_settings(SECRET_KEY="another-project"):  # noqa: S106 - a test key
        assert owner_for_task("4f1c", "report:2026-05") != owner  # not guessable from the id


@pytest.mark.django_db(transaction=True)
def test_a_task_lock_takes_the_kind_it_is_given() -> None:
    """``shared``, ``limit``, ``reentrant`` and ``label`` reach the run's ``lock()``."""
    from django_dlock.contrib.task_locks import LockedFunction, LockKind

    seen: list[tuple[str, int | None, str]] = []

    def body(report: str, held: Any) -> None:
        [hold] = DistributedLock.objects.holders(f"report:{report}")
        seen.append((hold.mode, hold.limit, hold.label))

    for kind, label in (
        (LockKind.shared_lock(), "reader"),
        (LockKind.semaphore(3), ""),
        (LockKind.exclusive(reentrant=True), ""),
    ):
        locked = LockedFunction(
            body,
            "report:{report}",
            ttl=30,
            auto_renew=False,
            on_lost="raise",
            kind=kind,
            label=label,
        )
        with locked.hold("report:may", None, None) as held:
            locked.run(held, ("may",), {})
    assert seen == [("shared", None, "reader"), ("shared", 3, ""), ("exclusive", None, "")]
