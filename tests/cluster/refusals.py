"""The failover runs' check beyond the torture checker's: no false "not acquired".

The torture checker judges refusals only inside a fault's window, which a
failover has not sharply (the old leader may serve until it demotes itself).
This check needs no window: an acquire that answered "not acquired" must have
met a possible holder, another owner's acquisition (or an acquire that raised,
which may have committed) begun before the refusal ended and maybe still valid
when it started. The load's processes make each acquisition as a new owner.
Reported as invariant 4's violations.
"""

from __future__ import annotations

from tests.torture.history import Event
from tests.torture.sections import read
from tests.torture.violations import Violation

Hold = tuple[str, float, float]  # owner, from, until


def false_refusals(events: list[Event]) -> list[Violation]:
    found = []
    for resource, calls in read(events).calls.items():
        calls = sorted((c for c in calls if "t1" in c), key=lambda c: c["t0"])
        holds = sorted(_holds(calls), key=lambda hold: hold[1])
        refused = sorted(
            (c for c in calls if c["op"] == "acquire" and "lock" in c and c["lock"] is None),
            key=lambda c: c["t1"],
        )
        latest: dict[str, float] = {}  # owner -> the latest `until` of its holds begun so far
        next_hold = 0
        for call in refused:
            while next_hold < len(holds) and holds[next_hold][1] < call["t1"]:
                owner, _, until = holds[next_hold]
                latest[owner] = max(latest.get(owner, until), until)
                next_hold += 1
            if not any(o != call["owner"] and u > call["t0"] for o, u in latest.items()):
                found.append(
                    Violation(
                        4,
                        f"{resource}: {call['owner']} was told 'not acquired' at "
                        f"{call['t0']:.3f} with no possible holder",
                        (call,),
                    )
                )
    return found


def _holds(calls: list[Event]) -> list[Hold]:
    """When each acquisition (or acquire that raised) may have held the lock:
    until its release answered, at the latest until its ttl ran out."""
    holds = []
    pending: dict[str, tuple[float, float]] = {}  # owner -> its hold not yet released
    for call in calls:
        owner = call.get("owner", "")
        if call["op"] == "release":
            if owner in pending and call.get("result") == "released":
                begun, until = pending.pop(owner)
                holds.append((owner, begun, min(until, call["t1"])))
        elif call["op"] == "acquire" and ("error" in call or call.get("lock")):
            if owner in pending:
                holds.append((owner, *pending.pop(owner)))
            pending[owner] = (call["t0"], call["t1"] + call["ttl"])
    holds.extend((owner, *hold) for owner, hold in pending.items())
    return holds
