"""The failover runs' check beyond the torture checker's: no false "not acquired".

The torture checker judges refusals only inside a fault's window, which a
failover has not sharply (the old leader may serve until it demotes itself).
This check needs no window: an acquire that answered "not acquired" must have
met possible holders in its way, other owners' acquisitions (or acquires
that raised, which may have committed) begun before the refusal ended and
maybe still valid when it started: for a writer any holder, for a reader a
writer, for a permit as many holders as the semaphore has permits. The load's
processes make each acquisition as a new owner (an all-or-nothing call's
parts share one). Reported as invariant 4's violations.
"""

from __future__ import annotations

from tools.torture.history import Event
from tools.torture.sections import read
from tools.torture.violations import Violation

# (owner, from, until, exclusive): when an acquisition may have held the lock.
Hold = tuple[str, float, float, bool]
# A hold never outlives its call by more than this (seconds): the load's ttl is less.
LONGEST_HOLD = 120.0


def false_refusals(events: list[Event]) -> list[Violation]:
    found = []
    for resource, calls in read(events).calls.items():
        calls = sorted((c for c in calls if "t1" in c), key=lambda c: c["t0"])
        holds = sorted(_holds(calls), key=lambda hold: hold[1])
        # (A part of an all-or-nothing call that took nothing says nothing of
        # which part was in the way.)
        refused = sorted(
            (
                c
                for c in calls
                if c["op"] == "acquire" and "lock" in c and c["lock"] is None and "of" not in c
            ),
            key=lambda c: c["t1"],
        )
        latest: dict[str, tuple[float, bool]] = {}  # owner -> (until, exclusive) of its holds
        next_hold = 0
        for call in refused:
            while next_hold < len(holds) and holds[next_hold][1] < call["t1"]:
                owner, _, until, exclusive = holds[next_hold]
                before = latest.get(owner, (until, exclusive))
                latest[owner] = (max(before[0], until), before[1] or exclusive)
                next_hold += 1
            if len(latest) > 1000:  # forget the holds that ended long ago
                latest = {o: h for o, h in latest.items() if h[0] > call["t0"] - LONGEST_HOLD}
            possible = [
                exclusive
                for owner, (until, exclusive) in latest.items()
                if owner != call["owner"] and until > call["t0"]
            ]
            if not _in_the_way(call, possible):
                found.append(
                    Violation(
                        4,
                        f"{resource}: {call['owner']} was told 'not acquired' at "
                        f"{call['t0']:.3f} with no possible holder in its way",
                        (call,),
                    )
                )
    return found


def _in_the_way(call: Event, possible: list[bool]) -> bool:
    """Whether holders of these modes (exclusive or not) may refuse ``call``."""
    if call.get("limit") is not None:
        return len(possible) >= int(call["limit"])
    if call.get("shared"):
        return any(possible)
    return bool(possible)


def _holds(calls: list[Event]) -> list[Hold]:
    """When each acquisition (or acquire that raised) may have held the lock:
    until its release answered, at the latest until its ttl ran out."""
    holds = []
    pending: dict[str, tuple[float, float, bool]] = {}  # owner -> its hold not yet released
    for call in calls:
        owner = call.get("owner", "")
        if call["op"] == "release":
            if owner in pending and call.get("result") == "released":
                begun, until, exclusive = pending.pop(owner)
                holds.append((owner, begun, min(until, call["t1"]), exclusive))
        elif call["op"] == "acquire" and ("error" in call or call.get("lock")):
            if owner in pending:
                holds.append((owner, *pending.pop(owner)))
            exclusive = not call.get("shared") and call.get("limit") is None
            pending[owner] = (call["t0"], call["t1"] + call.get("ttl", LONGEST_HOLD), exclusive)
    holds.extend((owner, *hold) for owner, hold in pending.items())
    return holds
