"""Invariant 15: a window held at least ``every`` after its grant is not
taken sooner. Two ``once_per(resource, every)`` runs granted the same
resource are at least ``every`` apart, and a ``lock(..., min_hold=every)``
is not granted to another before ``acquired_at + every``: the grants as the
database recorded them (``acquired_at``), on its clock.

A ``min_hold`` run whose exit raised (a database error, or the lock found
lost: its ttl passed first) kept nothing past its ttl, which then bounds its
window instead. A ``once_per`` lock's ttl is ``every``: it holds in any case.
Nobody force-releases these resources in the torture run.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta

from tools.torture.history import Event
from tools.torture.sections import ONCE_PER, History, when
from tools.torture.violations import Violation


def windows(history: History) -> Iterable[Violation]:
    grants: dict[str, list[Event]] = defaultdict(list)
    for event in history.events:
        if event["op"] == "once_per" and event.get("lock"):
            grants[event["resource"]].append(event)
    for resource, runs in grants.items():
        runs.sort(key=lambda run: when(run["lock"]["acquired_at"]))
        for earlier, later in zip(runs, runs[1:], strict=False):
            start = when(earlier["lock"]["acquired_at"])
            end = start + timedelta(seconds=_kept(earlier))
            taken = when(later["lock"]["acquired_at"])
            if taken < end:
                yield Violation(
                    15,
                    f"{resource}: {later['kind']} granted at {taken.isoformat()}, "
                    f"{(taken - start).total_seconds():.6f} s after the {earlier['kind']} "
                    f"grant of {start.isoformat()} held for {_kept(earlier):g} s",
                    (earlier, later),
                )


def _kept(run: Event) -> float:
    """How long after its grant ``run``'s lock is held at least (seconds)."""
    every = float(run["every"])
    if run["kind"] == ONCE_PER or ("error" not in run and "lost" not in run):
        return every
    return min(every, float(run["ttl"]))
