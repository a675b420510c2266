"""Mutual exclusion, the first-acquire race and fencing, with real OS processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_dlock.models import DistributedLock
from tests import workers_core
from tests.utils import database_settings, run_in_processes, spawn

pytestmark = pytest.mark.django_db(transaction=True)

PROCESSES = 8


def test_mutual_exclusion_of_eight_processes(tmp_path: Path) -> None:
    """Eight processes poll for one lock and, holding it, read a counter, wait 1 ms and
    write it back plus one. The counter is a file, not a row: on SQLite the pollers'
    refused tries take the write lock for a moment each, and a row's update, waiting in
    SQLite's busy handler (which sleeps longer each time it finds the database busy),
    made each turn last up to seconds (100 s for the test)."""
    iterations = 50
    counter = tmp_path / "counter"
    counter.write_text("0")
    start = spawn.Barrier(PROCESSES)

    results = run_in_processes(
        workers_core.increment_under_lock,
        [(database_settings(), "job:counter", str(counter), iterations, start)] * PROCESSES,
    )

    # Every increment happened inside the lock: none was lost to a race.
    assert int(counter.read_text()) == PROCESSES * iterations
    # The critical sections, ordered by entry, never overlap ...
    turns = sorted(turn for worker in results for turn in worker)
    assert len(turns) == PROCESSES * iterations
    for before, after in zip(turns, turns[1:], strict=False):
        assert before[1] <= after[0], f"overlap: {before} and {after}"
    # ... and each holder saw a larger fencing token than the one before it.
    tokens = [token for _, _, token in turns]
    assert all(a < b for a, b in zip(tokens, tokens[1:], strict=False))


def test_first_acquire_race_has_exactly_one_winner_and_no_exception() -> None:
    for attempt in range(3):
        resource = f"job:race-{attempt}"
        start = spawn.Barrier(PROCESSES)

        results = run_in_processes(
            workers_core.acquire_once, [(database_settings(), resource, start)] * PROCESSES
        )

        assert [error for _, error in results if error] == []
        assert sum(won for won, _ in results) == 1
        assert DistributedLock.objects.filter(resource=resource).count() == 1


def test_fencing_tokens_increase_per_resource_under_release_and_purge() -> None:
    resources = [f"job:fence-{n}" for n in range(3)]
    start = spawn.Barrier(4)

    results = run_in_processes(
        workers_core.churn_and_purge, [(database_settings(), resources, 60, start)] * 4
    )

    # Holders of one resource follow each other; each saw a larger token than the last.
    seen = sorted((pair for worker in results for pair in worker), key=lambda seen: seen[1])
    assert len(seen) > 20
    for resource in resources:
        tokens = [token for r, _, token in seen if r == resource]
        assert all(a < b for a, b in zip(tokens, tokens[1:], strict=False)), tokens
    # Later acquisitions (after all purges) still exceed every token issued.
    for resource in resources:
        highest = max((token for r, _, token in seen if r == resource), default=0)
        lock = DistributedLock.objects.acquire(resource, owner="last", ttl=30)
        assert lock is not None and lock.fencing_token > highest
