"""Invariants 1, 7, 8 and 12's overlaps: who held a resource beside whom, on
the monotonic clock every process of the host shares.

1. No exclusive hold overlaps any other hold (exclusive, a reader's). An
   overlap of an earlier section A with a later B is allowed only if A's hold
   was gone when B acquired it, A's holder was told, and the guarded store
   refused A's late writes and reads. "Gone": expired by the database clock
   (A's latest known ``expires_at`` <= B's ``acquired_at``), or
   force-released (the whole resource, or A's own hold) between A's
   acquisition and B's entry. "Late": begun after B's first accepted write
   or read ended, so after the store had seen B's larger token.
7. Readers ran together: the sections of readers (not told they lost their
   hold) of one resource that overlap another's are counted; a history with
   readers of which none overlapped another shows nothing about shared holds.
8. A semaphore of N permits never has more than N valid holders: at each
   permit's entry, the other permits still inside their sections number
   fewer than N, not counting those whose permit was gone and who were told.
12. At most one valid leader term at a time: invariant 1 for the resources
   that leaders campaign for, reported as 12.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from tools.torture.history import Event
from tools.torture.sections import PERMIT, SHARED, History, Section
from tools.torture.violations import Violation


def by_resource(history: History) -> dict[str, list[Section]]:
    sections: dict[str, list[Section]] = {}
    for section in history.sections.values():
        sections.setdefault(section.resource, []).append(section)
    return sections


def forced_releases(history: History, resource: str) -> list[Event]:
    """The force-releases of ``resource`` that released something."""
    calls = history.calls.get(resource, [])
    return [e for e in calls if e["op"] == "force_release" and e.get("released")]


def _concurrent(sections: list[Section]) -> Iterator[tuple[Section, Section]]:
    """Each pair (earlier, later) of sections of different processes where the
    earlier, in ``sections``' order, was still inside when the later entered."""
    active: list[Section] = []
    for later in sections:
        active = [a for a in active if a.end > later.enter]
        for earlier in active:
            if earlier.process != later.process and earlier.enter <= later.end:
                yield earlier, later
        active.append(later)


# -- 1 and 12 ---------------------------------------------------------------------------


def overlaps(history: History, allowed: set[tuple[str, str]]) -> Iterable[Violation]:
    for resource, sections in by_resource(history).items():
        invariant = 12 if resource in history.leaders else 1
        # In acquisition order: a holder may record its entry late (stalled
        # between the acquisition and the record), after a later holder's.
        sections.sort(key=lambda s: (s.token, s.enter))
        forced = forced_releases(history, resource)
        for earlier, later in _concurrent(sections):
            if not (earlier.exclusive or later.exclusive):
                continue  # readers together; permits are invariant 8's
            problem = judge(earlier, later, forced)
            if problem is None:
                allowed.add((earlier.cs, later.cs))
                continue
            yield Violation(
                invariant,
                f"{resource}: {earlier.cs} ({earlier.kind}, token {earlier.token}) and "
                f"{later.cs} ({later.kind}, token {later.token}) overlap: {problem}",
                (earlier.events[0], later.events[0]),
            )


def gone(earlier: Section, later: Section, forced: list[Event]) -> bool:
    """Whether ``earlier``'s hold was gone when ``later`` acquired the lock."""
    if earlier.expires_at <= later.acquired_at:
        return True
    return any(
        f["t1"] > earlier.acquire_t0
        and f["t0"] < later.enter
        and f.get("owner") in (None, earlier.owner)
        for f in forced
    )


def judge(earlier: Section, later: Section, forced: list[Event]) -> str | None:
    """None when the overlap is allowed, else why not."""
    if not gone(earlier, later, forced):
        return (
            f"the earlier hold was valid until {earlier.expires_at.isoformat()}, "
            f"after the later acquisition at {later.acquired_at.isoformat()}"
        )
    if not earlier.told:
        return "the earlier holder was never told that it lost the lock"
    late = earlier.accesses_after(later.first_access())
    if late:
        return f"the store accepted {late} late write(s) or read(s) of the earlier holder"
    return None


# -- 7 ----------------------------------------------------------------------------------


def reader_overlaps(history: History) -> tuple[int, int]:
    """(reader sections, pairs of them that overlapped), readers not told."""
    readers = pairs = 0
    for sections in by_resource(history).values():
        shared = sorted(
            (s for s in sections if s.kind == SHARED and not s.told), key=lambda s: s.enter
        )
        readers += len(shared)
        pairs += sum(1 for _ in _concurrent(shared))
    return readers, pairs


def readers_together(history: History) -> Iterable[Violation]:
    readers, pairs = reader_overlaps(history)
    if readers >= 2 and pairs == 0:
        yield Violation(
            7,
            f"{readers} reader sections, none of them beside another: the run shows "
            "nothing about readers holding together",
            (),
        )


# -- 8 ----------------------------------------------------------------------------------


def permits(history: History) -> Iterable[Violation]:
    for resource, sections in by_resource(history).items():
        held = sorted((s for s in sections if s.kind == PERMIT), key=lambda s: s.enter)
        if not held:
            continue
        forced = forced_releases(history, resource)
        active: list[Section] = []
        for later in held:
            active = [a for a in active if a.end > later.enter]
            valid = [
                a
                for a in active
                if a.process != later.process and not (a.told and gone(a, later, forced))
            ]
            limit = later.limit or math.inf
            if len(valid) >= limit:
                yield Violation(
                    8,
                    f"{resource}: {later.cs} (token {later.token}) entered while "
                    f"{len(valid)} other permits of {limit} were valid: "
                    f"{', '.join(a.cs for a in valid)}",
                    (later.events[0], *(a.events[0] for a in valid)),
                )
            active.append(later)
