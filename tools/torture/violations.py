"""What the checker reports: a violation of one numbered invariant, and the
invariants' short names (the report's rows)."""

from __future__ import annotations

from dataclasses import dataclass

from tools.torture.history import Event

INVARIANTS = {
    1: "no exclusive hold overlaps another hold",
    2: "fencing tokens increase, across kinds",
    3: "only the holder renews/releases",
    4: "a fault raises",
    5: "counter = accepted writes",
    6: "no committed lock lost",
    7: "readers ran together",
    8: "at most N valid permits",
    9: "hold counts match the calls",
    10: "no reader admitted past a queued writer",
    11: "all or nothing",
    12: "one valid leader term, terms increase",
    13: "at most N throttle grants per period",
    14: "throttle decisions agree with the grants",
    15: "once_per / min_hold windows kept",
    16: "no grant inside a lock-delay",
    17: "no waiter passed by one with a worse key",
    18: "no guarded write outside its owner's validity",
}


@dataclass(frozen=True)
class Violation:
    invariant: int
    message: str
    events: tuple[Event, ...]
