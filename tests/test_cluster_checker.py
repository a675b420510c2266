"""The failover runs' history checker finds what it must (no cluster needed)."""

from __future__ import annotations

from typing import Any

from tests.cluster.checker import check


def acquire(
    process: str, start: float, end: float, token: int | None, *, ttl: float = 8
) -> dict[str, Any]:
    call: dict[str, Any] = {
        "process": process,
        "op": "acquire",
        "args": {"resource": "r", "owner": process, "ttl": ttl},
        "start": start,
        "end": end,
    }
    if token is None:
        call["outcome"] = {"acquired": False}
    else:
        call["outcome"] = {"acquired": True, "fencing_token": token}
        call["enter"], call["exit"] = end, end + 0.5
    return call


def release(process: str, start: float, end: float, result: str = "released") -> dict[str, Any]:
    return {
        "process": process,
        "op": "release",
        "args": {"resource": "r", "owner": process},
        "start": start,
        "end": end,
        "outcome": {"result": result},
    }


def kinds(history: list[dict[str, Any]]) -> list[str]:
    return sorted(v.kind for v in check(history))


def test_a_clean_history_has_no_violation() -> None:
    history = [
        acquire("a", 0, 1, 1),
        acquire("b", 1.1, 1.2, None),  # a holds it
        release("a", 1.6, 1.7),
        acquire("b", 2, 3, 2),
        release("b", 3.6, 3.7),
        acquire("a", 4, 5, 3),
    ]
    assert kinds(history) == []


def test_two_holders_at_once_overlap() -> None:
    assert "overlap" in kinds([acquire("a", 0, 1, 1), acquire("b", 1.1, 1.2, 2)])


def test_a_smaller_token_after_a_larger_one_is_out_of_order() -> None:
    history = [acquire("a", 0, 1, 5), release("a", 1.6, 1.7), acquire("b", 2, 3, 4)]
    assert kinds(history) == ["token-order"]


def test_a_token_granted_twice_is_repeated() -> None:
    history = [acquire("a", 0, 1, 5), release("a", 1.6, 1.7), acquire("b", 2, 3, 5)]
    assert "token-repeated" in kinds(history)


def test_the_holder_reacquiring_keeps_its_token() -> None:
    history = [acquire("a", 0, 1, 5), acquire("a", 2, 3, 5)]
    assert kinds(history) == []


def test_not_acquired_with_nobody_holding_is_false() -> None:
    history = [acquire("a", 0, 1, 1), release("a", 1.6, 1.7), acquire("b", 2, 3, None)]
    assert kinds(history) == ["false-not-acquired"]


def test_an_acquire_that_raised_may_be_the_holder() -> None:
    raised = acquire("a", 0, 1, None)
    raised["outcome"] = {"exception": "OperationalError: server closed the connection"}
    assert kinds([raised, acquire("b", 2, 3, None)]) == []
    # ...until its ttl ran out.
    assert kinds([raised, acquire("b", 10, 11, None)]) == ["false-not-acquired"]
