"""Who a release grants shared holds to (``backends.shared_grants``, issue 46):
the head of the queue and the waiters that may join beside it, in ticket order,
as the admission rule says (``MAY_JOIN``), without a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from django_dlock.backends.results import LockRow
from django_dlock.backends.shared_grants import SharedGrants, _Waiter

pytestmark = pytest.mark.vendor_independent

NOW = datetime(2026, 12, 5, tzinfo=UTC)
TTL = timedelta(seconds=30)


def waiter(ticket: int, mode: str = "shared", limit: int | None = None, **wants: object) -> _Waiter:
    values = {"channel": f"c{ticket}", "ttl": TTL, **wants}
    return _Waiter(ticket, str(values["channel"]), f"o{ticket}", values["ttl"], mode, limit, "")  # type: ignore[arg-type]


def header(limit: int | None = None) -> LockRow:
    return LockRow(
        pk=1, resource="r", owner="", acquired_at=NOW, expires_at=NOW, fencing_token=7,
        hold_count=1, label="", limit=limit, now=NOW,
    )  # fmt: skip


def granted(
    waiters: list[_Waiter],
    held: int = 0,
    limit: int | None = None,
    holding: frozenset[str] = frozenset(),
) -> list[int]:
    grants = SharedGrants.__new__(SharedGrants)  # _fitting reads no statement
    alive = lambda channel: channel != "c-dead"  # noqa: E731
    chosen = grants._fitting(waiters, header(limit), held, alive, holding)
    return [one.ticket for one in chosen]


def test_readers_up_to_the_first_writer() -> None:
    queue = [waiter(1), waiter(2), waiter(3, "exclusive"), waiter(4)]
    assert granted(queue) == [1, 2]


def test_a_reader_that_polls_or_has_no_ttl_is_passed_but_not_granted() -> None:
    queue = [waiter(1), waiter(2, channel=""), waiter(3, ttl=None), waiter(4)]
    assert granted(queue) == [1, 4]


def test_a_writer_at_the_head_is_granted_nothing_here() -> None:
    assert granted([waiter(1, "exclusive"), waiter(2)]) == []


def test_permits_as_many_as_are_left_those_between_counted() -> None:
    queue = [waiter(t, limit=3) for t in (1, 2, 3, 4)]
    assert granted(queue) == [1, 2, 3]
    assert granted(queue, held=2, limit=3) == [1]
    assert granted(queue, held=3, limit=3) == []
    # A permit waiter that polls takes a permit itself: it counts as ahead.
    polling = [waiter(1, limit=3), waiter(2, limit=3, channel=""), waiter(3, limit=3)]
    assert granted(polling, held=1, limit=3) == [1]


def test_permits_of_another_limit_are_not_granted_beside_the_holds() -> None:
    assert granted([waiter(1, limit=2)], held=1, limit=3) == []


def test_a_waiter_whose_owner_holds_already_is_passed_but_not_granted() -> None:
    # (An explicit owner's other hold: a new one would replace it, one per owner.)
    queue = [waiter(t, limit=3) for t in (1, 2, 3)]
    assert granted(queue, held=1, limit=3, holding=frozenset({"o2"})) == [1]
    assert granted(queue, held=1, limit=3, holding=frozenset({"o1"})) == []
    assert granted([waiter(1), waiter(2), waiter(3)], holding=frozenset({"o2"})) == [1, 3]
