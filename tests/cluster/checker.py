"""A minimal history checker for the failover runs: overlapping holders,
fencing-token order, repeated tokens and false "not acquired".

A history is a list of calls as ``tests.cluster.load`` writes them: process,
op, args, outcome (``acquired`` with ``fencing_token``, ``result`` of a
release, or ``exception``), monotonic ``start``/``end``, and for a held lock
the critical section's ``enter``/``exit``. All processes run on one machine,
so their monotonic clocks agree.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Call = dict[str, Any]


@dataclass(frozen=True)
class Violation:
    kind: str  # overlap, token-order, token-repeated, false-not-acquired
    resource: str
    detail: str


def read_history(paths: list[Path]) -> list[Call]:
    calls: list[Call] = []
    for path in paths:
        with path.open() as lines:
            calls.extend(json.loads(line) for line in lines if line.strip())
    return sorted(calls, key=lambda call: call["start"])


def acquired(call: Call) -> bool:
    return call["op"] == "acquire" and call["outcome"].get("acquired") is True


def check(history: list[Call]) -> list[Violation]:
    by_resource: dict[str, list[Call]] = defaultdict(list)
    for call in history:
        by_resource[call["args"]["resource"]].append(call)
    violations: list[Violation] = []
    for resource, calls in by_resource.items():
        violations += _overlaps(resource, calls)
        violations += _token_order(resource, calls)
        violations += _false_not_acquired(resource, calls)
    return violations


def _overlaps(resource: str, calls: list[Call]) -> list[Violation]:
    sections = sorted(
        (c["enter"], c["exit"], c["process"], c["outcome"]["fencing_token"])
        for c in calls
        if acquired(c)
    )
    found = []
    latest: tuple[float, str, int] | None = None  # the section that ends last so far
    for enter, leave, process, token in sections:
        if latest is not None and enter < latest[0] and process != latest[1]:
            found.append(
                Violation(
                    "overlap",
                    resource,
                    f"{process} (token {token}) entered while {latest[1]} "
                    f"(token {latest[2]}) was inside",
                )
            )
        if latest is None or leave > latest[0]:
            latest = (leave, process, token)
    return found


def _token_order(resource: str, calls: list[Call]) -> list[Violation]:
    """Each new acquisition's token exceeds every token granted before it
    started; one token belongs to one holding (one process, no release between)."""
    found = []
    holdings: dict[int, Call] = {}  # token -> the acquisition that first got it
    granted_ends: list[float] = []  # when each holding was granted, in order
    max_token_so_far: list[int] = []  # the largest token granted up to that point
    released_since: dict[str, bool] = defaultdict(bool)
    for call in sorted(calls, key=lambda c: c["end"]):
        if call["op"] == "release" and call["outcome"].get("result") == "released":
            released_since[call["process"]] = True
        if not acquired(call):
            continue
        token = call["outcome"]["fencing_token"]
        first = holdings.get(token)
        if first is not None and (
            first["process"] != call["process"] or released_since[call["process"]]
        ):
            found.append(
                Violation(
                    "token-repeated",
                    resource,
                    f"token {token} granted to {first['process']} and again to {call['process']}",
                )
            )
        released_since[call["process"]] = False
        if first is not None:
            continue
        before = bisect.bisect_left(granted_ends, call["start"])
        if before and max_token_so_far[before - 1] >= token:
            found.append(
                Violation(
                    "token-order",
                    resource,
                    f"{call['process']} got token {token} after token "
                    f"{max_token_so_far[before - 1]} was granted",
                )
            )
        holdings[token] = call
        granted_ends.append(call["end"])
        max_token_so_far.append(max(token, max_token_so_far[-1] if max_token_so_far else 0))
    return found


def _false_not_acquired(resource: str, calls: list[Call]) -> list[Violation]:
    """An acquire that answered "not acquired" must have met a holder: another
    process's acquisition (or an acquire that raised, which may have committed)
    that started before it ended and could still be valid when it started."""
    holds = sorted(_holds(calls), key=lambda hold: hold[1])  # (process, from, until)
    refused = sorted(
        (c for c in calls if c["op"] == "acquire" and c["outcome"].get("acquired") is False),
        key=lambda c: c["end"],
    )
    found = []
    latest: dict[str, float] = {}  # process -> the latest `until` of its holds begun so far
    next_hold = 0
    for call in refused:
        while next_hold < len(holds) and holds[next_hold][1] < call["end"]:
            process, _, until = holds[next_hold]
            latest[process] = max(latest.get(process, until), until)
            next_hold += 1
        if not any(p != call["process"] and u > call["start"] for p, u in latest.items()):
            found.append(
                Violation(
                    "false-not-acquired",
                    resource,
                    f"{call['process']} was told 'not acquired' at {call['start']:.3f} "
                    "with no possible holder",
                )
            )
    return found


def _holds(calls: list[Call]) -> list[tuple[str, float, float]]:
    """When each acquisition (or acquire that raised) may have held the lock:
    until its release answered, at the latest until its ttl ran out."""
    holds = []
    pending: dict[str, tuple[float, float]] = {}  # process -> its hold not yet released
    for call in calls:  # in order of start; one process's calls never overlap
        process = call["process"]
        if call["op"] == "release":
            if process in pending and call["outcome"].get("result") == "released":
                begun, until = pending.pop(process)
                holds.append((process, begun, min(until, call["end"])))
            continue
        if call["outcome"].get("acquired") is False:
            continue
        if process in pending:
            holds.append((process, *pending.pop(process)))
        pending[process] = (call["start"], call["end"] + call["args"]["ttl"])
    holds.extend((process, *hold) for process, hold in pending.items())
    return holds
