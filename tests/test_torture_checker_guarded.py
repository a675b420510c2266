"""The torture run's checker on synthetic histories of guarded writes
(``held.atomic()``, invariant 18): blocks commit in token order per resource,
none that began after a later grant had returned commits, and each writer's
answer matches the table. Each case passes a clean history and rejects a
broken one."""

from __future__ import annotations

from typing import Any

import pytest

from tools.torture.checker import check
from tools.torture.synthetic import Events, holder, invariants

pytestmark = pytest.mark.vendor_independent


def write(process: str, token: int, t0: float, **outcome: Any) -> dict[str, Any]:
    cs = f"{process}:{token}"
    return {"p": process, "op": "guarded_write", "cs": cs, "resource": "r"} | {
        "write_id": f"{cs}#guarded", "token": token, "t0": t0, "t1": t0 + 0.01, **outcome
    }  # fmt: skip


def final(*rows: tuple[int, int, str]) -> dict[str, Any]:
    """The table: (seq, token, write id) each, on resource "r"."""
    return {"p": "runner", "op": "guarded_final", "rows": [[s, "r", t, w] for s, t, w in rows]}


def two_holders() -> Events:
    return holder("a", 1, 1, 2, ttl=1.5) + holder("b", 2, 3, 4, ttl=1.5)


def test_writes_in_token_order_pass() -> None:
    events = two_holders() + [
        write("a", 1, 1.5, committed=True, seq=1),
        write("b", 2, 3.5, committed=True, seq=2),
        final((1, 1, "a:1#guarded"), (2, 2, "b:2#guarded")),
    ]
    assert check(events) == []


def test_an_older_grants_write_committed_after_a_later_ones_is_rejected() -> None:
    events = two_holders() + [
        write("a", 1, 1.5, committed=True, seq=2),
        write("b", 2, 3.5, committed=True, seq=1),
        final((2, 1, "a:1#guarded"), (1, 2, "b:2#guarded")),
    ]
    violations = check(events)
    assert [v.invariant for v in violations] == [18]
    assert "committed after b:2#guarded" in violations[0].message


def test_a_block_begun_after_a_later_grant_returned_must_be_refused() -> None:
    late = write("a", 1, 3.2, committed=True, seq=1)  # b's grant returned at 3
    assert invariants([*two_holders(), late, final((1, 1, "a:1#guarded"))]) == [18]
    refused = write("a", 1, 3.2, committed=False, refused="lost")
    assert check([*two_holders(), refused, final()]) == []


def test_the_writers_answer_must_match_the_table() -> None:
    said_committed = write("a", 1, 1.5, committed=True, seq=1)
    assert invariants([*two_holders(), said_committed, final()]) == [18]
    unanswered = write("a", 1, 1.5, error={"class": "OperationalError", "message": "gone"})
    assert check([*two_holders(), unanswered, final((1, 1, "a:1#guarded"))]) == []
