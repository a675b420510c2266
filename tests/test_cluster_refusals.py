"""The failover runs' check for a false "not acquired" (no cluster needed)."""

from __future__ import annotations

from typing import Any

import pytest

from tools.cluster.refusals import false_refusals

pytestmark = pytest.mark.vendor_independent

AT = "2026-01-01T00:00:00+00:00"  # the database's clock plays no part here


def acquire(owner: str, t0: float, t1: float, token: int | None, ttl: float = 8) -> dict[str, Any]:
    lock = None
    if token is not None:
        lock = {"owner": owner, "token": token, "acquired_at": AT, "expires_at": AT}
    return {"p": owner, "op": "acquire", "resource": "r", "owner": owner, "ttl": ttl} | {
        "t0": t0,
        "t1": t1,
        "lock": lock,
    }


def release(owner: str, t0: float, t1: float, result: str = "released") -> dict[str, Any]:
    return {"p": owner, "op": "release", "resource": "r", "owner": owner} | {
        "t0": t0,
        "t1": t1,
        "result": result,
    }


def refused(events: list[dict[str, Any]]) -> list[str]:
    return [v.events[0]["owner"] for v in false_refusals(events)]


def test_not_acquired_while_another_owner_holds_it_is_true() -> None:
    events = [
        acquire("a.1", 0, 1, 1),
        acquire("b.1", 1.1, 1.2, None),  # a.1 holds it
        release("a.1", 1.6, 1.7),
        acquire("b.2", 2, 3, 2),
        release("b.2", 3.6, 3.7),
    ]
    assert refused(events) == []


def test_not_acquired_with_nobody_holding_is_false() -> None:
    events = [acquire("a.1", 0, 1, 1), release("a.1", 1.6, 1.7), acquire("b.1", 2, 3, None)]
    assert refused(events) == ["b.1"]
    assert [v.invariant for v in false_refusals(events)] == [4]


def test_not_acquired_by_the_holder_itself_is_false() -> None:
    assert refused([acquire("a.1", 0, 1, 1), acquire("a.1", 2, 3, None)]) == ["a.1"]


def test_an_acquire_that_raised_may_be_the_holder_until_its_ttl_ran_out() -> None:
    raised = acquire("a.1", 0, 1, None)
    del raised["lock"]
    raised["error"] = {"class": "OperationalError", "message": "server closed", "db": True}
    assert refused([raised, acquire("b.1", 2, 3, None)]) == []
    assert refused([raised, acquire("b.1", 10, 11, None)]) == ["b.1"]
