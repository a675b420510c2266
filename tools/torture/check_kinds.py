"""Invariants 9, 10 and 11: what the lock kinds promise beyond who held what.

9. Hold counts match the calls. Per hold (a resource and an owner): each
   grant answers the count it should have (1 for a new grant, one more for a
   reentrant one, the same for a plain re-acquire, an upgrade or a
   downgrade), each release answers DECREMENTED while more than one hold is
   left and RELEASED for the last, and ``holders()`` shows the count taken.
   A hold found lost (a release that found nothing, a force-release, an
   acquisition refused, ``holders()`` without it) is counted no further, nor
   is one after a call whose outcome is unknown (an error). A ``lock()``
   raises ``LockHeldByCaller`` only nested in its own holder's, which the
   torture run never does.
10. Writer preference: no reader is admitted past a queued writer. A reader
   whose acquisition began after a writer's ticket was in the queue (the
   ``queued`` event) gets no grant before that writer's: its token is larger
   than the writer's, or, when the writer timed out, it was granted after the
   writer's deadline. (The holder again, and a downgrade, are no new reader.)
   A wait that queued more than once is judged from its last ticket: the
   ``queued`` event is the INSERT's return, and on SQLite a lock transaction
   whose COMMIT met a reader (busy) is rolled back and run again, its first
   ticket never having been in the queue.
11. All or nothing: an ``acquire_all`` or ``lock([...])`` that took its locks
   answered a hold per resource asked, in the mode asked; one that took none
   left no hold of its owner, neither in ``holders()`` read right after it
   nor in any later snapshot of the lock tables.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable

from tools.torture.history import Event
from tools.torture.sections import (
    ACQUIRING,
    EXCLUSIVE,
    SHARED,
    Acquisition,
    History,
    per_resource,
)
from tools.torture.violations import Violation

# No lock call of a torture run takes longer (seconds).
LONGEST_CALL = 120.0

# -- 9 ----------------------------------------------------------------------------------


def hold_counts(history: History) -> Iterable[Violation]:
    per_hold: dict[tuple[str, str], list[Event]] = defaultdict(list)
    forced: dict[str, list[Event]] = defaultdict(list)
    for resource, calls in history.calls.items():
        for call in calls:
            if call["op"] == "force_release":
                forced[resource].append(call)
            elif call.get("owner"):
                per_hold[(resource, call["owner"])].append(call)
            if call.get("error", {}).get("class") == "LockHeldByCaller":
                yield Violation(
                    9,
                    f"{resource}: a lock() by {call['p']} that no hold of its own encloses "
                    "raised LockHeldByCaller",
                    (call,),
                )
    for event in history.events:
        if event["op"] == "holders" and event.get("cs"):
            per_hold[(event["resource"], event["owner"])].append(event)
            yield from _same_grant(history, event)
    starts = {}
    for resource, calls in forced.items():
        calls.sort(key=lambda e: e["t0"])
        starts[resource] = [e["t0"] for e in calls]
    for (resource, owner), events in per_hold.items():
        if not any(e["op"] in ACQUIRING and e.get("lock") for e in events):
            continue
        # The force-releases that overlap the hold's calls (they are short).
        begin: float = min(e["t0"] for e in events)
        end: float = max(float(e.get("t1") or e["t0"]) for e in events)
        at = starts.get(resource, [])
        near = forced.get(resource, [])[
            bisect.bisect_left(at, begin - LONGEST_CALL) : bisect.bisect_right(at, end)
        ]
        yield from _count(resource, owner, events, [f for f in near if f["t1"] >= begin])


def _same_grant(history: History, seen: Event) -> Iterable[Violation]:
    """A ``holders()`` read inside a ``lock()`` section shows the section's own
    grant (its token), or none: a re-entry adds holds to the hold it has."""
    section = history.sections.get(seen["cs"])
    mine = [hold for hold in seen["holds"] if hold["owner"] == seen["owner"]]
    if section is not None and mine and mine[0]["token"] != section.token:
        yield Violation(
            9,
            f"{seen['resource']}: {section.cs} holds token {section.token}, but holders() "
            f"at depth {seen.get('depth')} shows its owner's hold with token "
            f"{mine[0]['token']}: a re-entry took a new grant",
            (section.events[0], seen),
        )


def _count(
    resource: str, owner: str, events: list[Event], forced: list[Event]
) -> Iterable[Violation]:
    count, token = 0, None
    calls = sorted(events + forced, key=lambda e: e["t0"])
    following: list[Event | None] = [None] * len(calls)  # the holder's next call after each
    for n in range(len(calls) - 2, -1, -1):
        after = calls[n + 1]
        following[n] = after if after["op"] != "force_release" else following[n + 1]
    previous: Event | None = None  # the holder's last call so far
    for n, event in enumerate(calls):
        op = event["op"]
        if op == "force_release":
            if event.get("owner") not in (None, owner):
                continue
            if not (event.get("released") or "error" in event):
                continue
            # Between the holder's calls, it ended the hold; overlapping one of
            # them (an acquisition in flight: before or after its grant?), who
            # knows: count no further.
            later = following[n]
            if (previous is not None and previous.get("t1", previous["t0"]) > event["t0"]) or (
                later is not None and event["t1"] > later["t0"]
            ):
                return
            count = 0
            continue
        previous = event
        if "error" in event:
            return  # its outcome is unknown: count no further
        if op in ACQUIRING:
            lock = event.get("lock")
            if lock is None:
                count = 0  # refused: whatever it held is gone
                continue
            again = count > 0 and lock["token"] == token
            carried = op in ("upgrade", "downgrade") and count > 0
            expected = count + 1 if again and event.get("reentrant") else count if again else 1
            expected = count if carried else expected
            if lock.get("hold_count") is not None and lock["hold_count"] != expected:
                yield Violation(
                    9,
                    f"{resource}: {owner}'s {op} answered {lock['hold_count']} holds, "
                    f"{expected} taken",
                    (event,),
                )
            # Go on from what the database says (one violation, not a cascade).
            count, token = lock.get("hold_count") or expected, lock["token"]
        elif op in ("release", "unlock") and count:
            result = event.get("result")
            if result == "decremented" and count == 1:
                yield Violation(
                    9, f"{resource}: {owner}'s last hold answered DECREMENTED", (event,)
                )
            elif result == "released" and count > 1:
                yield Violation(
                    9,
                    f"{resource}: {owner}'s release answered RELEASED with {count - 1} "
                    "hold(s) left",
                    (event,),
                )
            count = count - 1 if result == "decremented" else 0
        elif op == "holders" and count:
            mine = [hold for hold in event["holds"] if hold["owner"] == owner]
            if mine and mine[0]["hold_count"] != count:
                yield Violation(
                    9,
                    f"{resource}: holders() showed {mine[0]['hold_count']} holds of {owner}, "
                    f"{count} taken",
                    (event,),
                )
            if not mine:
                count = 0


# -- 10 ---------------------------------------------------------------------------------


def writer_preference(history: History) -> Iterable[Violation]:
    waits = {
        (c["resource"], c["owner"]): c
        for calls in history.calls.values()
        for c in calls
        if c["op"] == "lock" and c.get("owner") and not c.get("depth")  # (not re-entries)
    }
    readers: dict[str, tuple[list[Acquisition], list[float]]] = {}
    granted: dict[str, tuple[list[int], list[float], list[int]]] = {}
    tickets = [e for e in history.events if e["op"] == "queued" and e.get("mode") == EXCLUSIVE]
    last_queued = {
        (e["resource"], e["owner"]): e["t"] for e in sorted(tickets, key=lambda e: e["t"])
    }
    for event in tickets:
        resource, writer, queued = event["resource"], event["owner"], event["t"]
        if queued < last_queued[(resource, writer)]:
            continue  # (its transaction may have been rolled back: see above)
        wait = waits.get((resource, writer))
        error = None if wait is None else wait.get("error")
        if wait is None or (error is not None and error["class"] != "LockNotAcquired"):
            continue  # it failed otherwise: when its ticket left is unknown
        if resource not in readers:
            ordered = sorted(
                (
                    a
                    for a in history.acquisitions.get(resource, [])
                    if a.mode == SHARED and not a.regrant and a.event["op"] != "downgrade"
                ),
                key=lambda a: a.t0,
            )
            readers[resource] = (ordered, [a.t0 for a in ordered])
            by_end = sorted(history.acquisitions.get(resource, []), key=lambda a: a.t1)
            tokens = sorted({a.token for a in by_end})
            highest = list(itertools.accumulate((a.token for a in by_end), max))
            granted[resource] = (highest, [a.t1 for a in by_end], tokens)
        candidates, starts = readers[resource]
        highest, ends, tokens = granted[resource]
        done = bisect.bisect_left(ends, queued)
        floor = highest[done - 1] if done else 0  # the largest token granted before the queuing
        # Readers that began after the ticket was queued, and before the
        # writer's wait ended (a later one cannot have been granted first).
        until = wait["t1"] if wait.get("lock") else wait["t0"] + (wait.get("timeout") or 0)
        during = candidates[bisect.bisect_right(starts, queued) : bisect.bisect_left(starts, until)]
        if wait.get("lock"):
            term = wait["lock"]["token"]
            early = [a for a in during if a.token < term]
            how = f"before the writer's grant (token {term})"
        else:
            early = [a for a in during if a.t1 < until]
            how = "while it waited, before its deadline"
        for reader in early:
            if _hidden_grant(tokens, floor, reader.token):
                continue
            yield Violation(
                10,
                f"{resource}: reader {reader.owner} (token {reader.token}) began after writer "
                f"{writer} was queued and was admitted {how}",
                (event, reader.event),
            )


def _hidden_grant(tokens: list[int], floor: int, token: int) -> bool:
    """Whether a token between ``floor`` and ``token`` was granted that no
    acquisition of the history returned: maybe a release handed the lock to
    the queued writer (SQLite hands it to the head of the queue), whose ticket
    left the queue then, and someone took that grant away (an operator's
    force-release, its expiry) before the writer saw it."""
    recorded = bisect.bisect_left(tokens, token) - bisect.bisect_right(tokens, floor)
    return recorded < token - floor - 1


# -- 11 ---------------------------------------------------------------------------------


def all_or_nothing(history: History) -> Iterable[Violation]:
    refused: dict[str, Event] = {}  # owner -> its call that took nothing
    for event in history.events:
        if event["op"] not in ("acquire_all", "lock_all"):
            continue
        locks = event.get("locks")
        if isinstance(locks, list):
            yield from _all_taken(event)
        elif "error" not in event or event["error"]["class"] == "LockNotAcquired":
            refused[event["owner"]] = event
    for event in history.events:
        if event["op"] == "holders" and event.get("set") and event["owner"] in refused:
            held = [h for h in event["holds"] if h["owner"] == event["owner"]]
            if held:
                yield Violation(
                    11,
                    f"{event['resource']}: held by {event['owner']}, whose "
                    f"{refused[event['owner']]['op']} took nothing",
                    (refused[event["owner"]], event),
                )
        elif event["op"] == "snapshot":
            for row in [*event["rows"], *event.get("holds", [])]:
                call = refused.get(row["owner"])
                if call is not None and call["t0"] < event["t0"]:
                    yield Violation(
                        11,
                        f"{row['resource']}: a row of {row['owner']}, whose {call['op']} "
                        "took nothing, at a snapshot",
                        (call, event),
                    )


def _all_taken(event: Event) -> Iterable[Violation]:
    for call in per_resource(event):
        lock = call.get("lock")
        mode = SHARED if call.get("shared") else EXCLUSIVE
        if not lock or lock.get("mode", mode) != mode:
            yield Violation(
                11,
                f"{call['resource']}: {event['op']} by {event['owner']} answered "
                f"{lock and lock.get('mode')} where {mode} was asked",
                (event,),
            )
