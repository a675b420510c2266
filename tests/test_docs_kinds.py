"""The lock kinds' examples of the docs (docs/kinds.md) run and do
what the page says."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from django_dlock.models import DistributedLock
from tests.docs_utils import run_example

pytestmark = pytest.mark.django_db(transaction=True)

Locks = DistributedLock.objects


def test_reentrant_example_reenters_its_own_lock() -> None:
    depth: list[int] = []

    def reindex_part(shard: int) -> None:
        depth.append(Locks.holders(f"index:{shard}")[0].hold_count)
        if len(depth) < 3:
            rebuild_index(shard)

    rebuild_index = run_example("reentrant", reindex_part=reindex_part)["rebuild_index"]
    rebuild_index(7)
    assert depth == [1, 2, 3]
    assert Locks.holders("index:7") == []


def test_read_write_example_lets_readers_in_together_and_a_writer_alone() -> None:
    inside = threading.Barrier(2, timeout=10)

    def load_report(month: str) -> str:
        inside.wait()  # both readers are in at once, or this times out
        return month

    saved: list[int] = []
    namespace = run_example(
        "read write",
        load_report=load_report,
        save_report=lambda month, fencing_token: saved.append(fencing_token),
    )

    def read() -> None:
        try:
            namespace["read_report"]("2026-05")
        finally:
            connection.close()

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(15)
    namespace["write_report"]("2026-05")
    assert len(saved) == 1 and saved[0] > 2  # after both readers' tokens


def test_semaphore_example_runs_within_its_limit() -> None:
    def run_on_gpu(job: str) -> int:
        return len(Locks.holders("gpu"))

    render = run_example("semaphore", run_on_gpu=run_on_gpu)["render"]
    assert render("frame") == 1


def test_several_example_holds_both_accounts() -> None:
    moved: list[dict[str, int]] = []

    def move_money(source: int, target: int, amount: int, tokens: dict[str, int]) -> None:
        assert Locks.acquire("account:1", owner="x", ttl=5) is None
        moved.append(tokens)

    run_example("several", move_money=move_money)["transfer"](1, 2, 10)
    assert list(moved[0]) == ["account:1", "account:2"]


def test_leader_example_leads_until_its_lease_is_lost() -> None:
    terms: list[int] = []

    def work(term: int) -> None:
        terms.append(term)
        if len(terms) == 1:
            [leader] = Locks.holders("scheduler")
            assert " pid " in leader.label
            Locks.force_release("scheduler")  # deposed
        time.sleep(0.05)

    lead_forever: Any = run_example("leader")["lead_forever"]
    with pytest.raises(Exception, match="lost"):  # the exit reports the loss
        lead_forever(work)
    assert len(set(terms)) == 1
