"""Invariant 4: a lock call made while a fault made the database unusable
raised a database error: it never came back as "not acquired" nor as a
success (a throttle's use: neither granted nor refused, each locks its key's
row first; a ``once_per`` run: neither due nor "not due"). A holder whose auto-renew connection was killed is told.
Not judged either: a call on a hold its section had already been told it lost
(its ``LockExpired``, raised without the database, is the truth, whatever the
database's state: a head stopped past its grant's lease, resumed in a restart).
Not judged: the release of an ``until="commit"`` lock after its transaction
ended (its ``unlock`` says whether it ``rolled_back``), which the library makes with no caller to raise
to: it logs a failed one, and the lock expires within its ttl."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from tools.torture.history import Event
from tools.torture.sections import LOCK_OPS, History
from tools.torture.violations import Violation


def faults(history: History) -> Iterable[Violation]:
    calls: dict[str, list[Event]] = {}
    lost: dict[str, bool] = {}  # each process's open section: told its lock was lost
    for event in history.events:
        if event["op"] == "cs_enter":
            lost[event["p"]] = False
        elif event["op"] == "cs_told" and event.get("how") == "lost":
            lost[event["p"]] = True
        elif event["op"] in LOCK_OPS and "t1" in event:
            if lost.get(event["p"]) and event.get("error", {}).get("class") == "LockExpired":
                continue  # the hold was gone before the call (see the docstring)
            calls.setdefault(event["p"], []).append(event)
    starts: dict[str, list[float]] = {}
    for process, process_calls in calls.items():
        process_calls.sort(key=lambda e: e["t0"])
        starts[process] = [e["t0"] for e in process_calls]
    for fault in (e for e in history.events if e["op"] == "fault"):
        scope = fault.get("scope", "*")
        window: tuple[float, float] | None = fault.get("raise_window")
        for process, process_calls in calls.items():
            if scope not in ("*", process):
                continue
            first = bisect.bisect_left(starts[process], window[0]) if window else 0
            last = bisect.bisect_right(starts[process], window[1]) if window else 0
            inside = [c for c in process_calls[first:last] if window and c["t1"] <= window[1]]
            spanning = []
            if fault.get("raise_span"):
                before = bisect.bisect_right(starts[process], fault["t0"])
                spanning = [
                    c for c in process_calls[max(before - 3, 0) : before] if c["t1"] >= fault["t0"]
                ]
            for call in inside + spanning:
                if "rolled_back" in call:
                    continue
                if not call.get("error", {}).get("db"):
                    outcome = call.get("error", {}).get("class") or _outcome(call)
                    yield Violation(
                        4,
                        f"{call['op']} by {process} during {fault['kind']} came back as {outcome}",
                        (fault, call),
                    )
        if fault.get("tell_span"):
            for section in history.sections.values():
                if (
                    section.process == scope
                    and section.enter <= fault["t0"] < section.end
                    and not section.told
                ):
                    yield Violation(
                        4,
                        f"{section.cs} was not told that its lock was lost by {fault['kind']}",
                        (fault, section.events[0]),
                    )


def _outcome(call: Event) -> str:
    if call["op"] == "once_per" and "due" in call:
        return "due" if call["due"] else "not due"
    for key in ("granted", "lock", "locks", "result", "results", "released", "deleted"):
        if key in call:
            value = call[key]
            if key in ("lock", "locks") and value is None:
                return "not acquired"
            return f"{key}={value!r}"
    return "a success"
