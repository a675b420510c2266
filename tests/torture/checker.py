"""The checker of a torture run's history: ``check(events) -> [Violation]``.

A pure function of the history (see ``history.py``). The invariants:

1. Two holders' critical sections on one resource never overlap in monotonic
   time. An overlap of an earlier section A with a later B is allowed only if
   A's lock was gone when B acquired it, A's holder was told, and A's late
   writes were refused by the guarded store. "Gone": expired by the database
   clock (A's latest known ``expires_at`` <= B's ``acquired_at``), or
   force-released by an operator between A's acquisition and B's entry.
   "Told": ``handle.lost``, ``LockExpired`` or ``LockNotOwned``, a failed
   renew or release (a ``None``, a refusal or an error), or the holder's own
   deadline (acquired + ttl on its monotonic clock) passed, recorded in A's
   section. "Late": a write of A that started after B's first accepted write
   ended, so after the store had seen B's larger token. (A write of A that
   reaches the store before B's first one carries the largest token the
   store has seen; no fenced store can refuse it.)
2. Fencing tokens strictly increase per resource in acquisition order: an
   acquisition that started after another had returned has a larger token,
   and one token is only ever given to one owner (its re-acquisitions keep it).
3. A release or renew that succeeded was made by the owner holding the lock:
   no other owner had acquired it, and nobody had released it, since.
4. A lock call made while a fault made the database unusable raised a
   database error: it never came back as "not acquired" nor as a success.
   A holder whose auto-renew connection was killed is told.
5. The store's counter (read, then written back plus one by each accepted
   write) equals the number of accepted fenced writes, except for the lost
   updates of overlaps that invariant 1 allows; and the store's log agrees
   with what the writers recorded.
6. Nothing is lost: at each snapshot of the lock table, the latest completed
   acquisition of a resource that was neither released nor expired (by the
   snapshot's database clock) is there, with its owner and token; and no row
   has a smaller token than one granted on its resource before the snapshot
   (a released lock keeps its row and token, and a purged one its floor).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from tests.torture.history import Event
from tests.torture.sections import (
    LOCK_OPS,
    Acquisition,
    History,
    Section,
    read,
    when,
)

# No lock call of a torture run takes longer (seconds); waits time out sooner.
LONGEST_CALL = 120.0


@dataclass(frozen=True)
class Violation:
    invariant: int
    message: str
    events: tuple[Event, ...]


def check(events: list[Event]) -> list[Violation]:
    """Every violation of the six invariants in ``events``, in invariant order."""
    history = read(events)
    allowed: set[tuple[str, str]] = set()
    violations = list(_overlaps(history, allowed))
    violations += _tokens(history)
    violations += _owners(history)
    violations += _faults(history)
    violations += _counter(history, allowed)
    violations += _snapshots(history)
    return violations


# -- 1 ---------------------------------------------------------------------------------


def _overlaps(history: History, allowed: set[tuple[str, str]]) -> Iterable[Violation]:
    by_resource: dict[str, list[Section]] = {}
    for section in history.sections.values():
        by_resource.setdefault(section.resource, []).append(section)
    for resource, sections in by_resource.items():
        # In acquisition order: a holder may record its entry late (stalled
        # between the acquisition and the record), after a later holder's.
        sections.sort(key=lambda s: (s.token, s.enter))
        forced = [
            e
            for e in history.calls.get(resource, [])
            if e["op"] == "force_release" and e.get("released")
        ]
        active: list[Section] = []
        for later in sections:
            active = [a for a in active if a.end > later.enter]
            for earlier in active:
                if earlier.process == later.process or earlier.enter > later.end:
                    continue
                problem = _judge(earlier, later, forced)
                if problem is None:
                    allowed.add((earlier.cs, later.cs))
                else:
                    yield Violation(
                        1,
                        f"{resource}: {earlier.cs} (token {earlier.token}) and {later.cs} "
                        f"(token {later.token}) overlap: {problem}",
                        (earlier.events[0], later.events[0]),
                    )
            active.append(later)


def _judge(earlier: Section, later: Section, forced: list[Event]) -> str | None:
    """None when the overlap is allowed, else why not."""
    expired = earlier.expires_at <= later.acquired_at
    was_forced = any(f["t1"] > earlier.acquire_t0 and f["t0"] < later.enter for f in forced)
    if not expired and not was_forced:
        return (
            f"the earlier lock was valid until {earlier.expires_at.isoformat()}, "
            f"after the later acquisition at {later.acquired_at.isoformat()}"
        )
    if not earlier.told:
        return "the earlier holder was never told that it lost the lock"
    first = min((w.t1 for w in later.writes if w.accepted), default=math.inf)
    late = [w for w in earlier.writes if w.t0 > first and w.accepted]
    if late:
        return f"the store accepted {len(late)} late write(s) of the earlier holder"
    return None


# -- 2 ---------------------------------------------------------------------------------


def _tokens(history: History) -> Iterable[Violation]:
    for resource, acquisitions in history.acquisitions.items():
        first: dict[int, Acquisition] = {}
        for acquisition in acquisitions:
            seen = first.setdefault(acquisition.token, acquisition)
            if seen.owner != acquisition.owner or (
                seen.acquired_at
                and acquisition.acquired_at
                and seen.acquired_at != acquisition.acquired_at
            ):
                yield Violation(
                    2,
                    f"{resource}: token {acquisition.token} was issued twice, to "
                    f"{seen.owner} and to {acquisition.owner}",
                    (seen.event, acquisition.event),
                )
        ordered = sorted(acquisitions, key=lambda a: a.t1)
        ends = [a.t1 for a in ordered]
        best = _running_max(ordered)
        for acquisition in acquisitions:
            n = bisect.bisect_left(ends, acquisition.t0)
            if n and best[n - 1].token > acquisition.token:
                yield Violation(
                    2,
                    f"{resource}: token {acquisition.token} was issued after token "
                    f"{best[n - 1].token} had been",
                    (best[n - 1].event, acquisition.event),
                )


# -- 3 ---------------------------------------------------------------------------------


def _owners(history: History) -> Iterable[Violation]:
    for resource, calls in history.calls.items():
        acquisitions = sorted(history.acquisitions.get(resource, []), key=lambda a: a.t1)
        ends = [a.t1 for a in acquisitions]
        holders = _running_max(acquisitions)
        by_owner: dict[str, list[Acquisition]] = {}
        for acquisition in acquisitions:
            by_owner.setdefault(acquisition.owner, []).append(acquisition)
        releases = sorted((e for e in calls if _released(e)), key=lambda e: e["t1"])
        release_ends = [e["t1"] for e in releases]
        for call in calls:
            owner: str = call.get("owner") or ""
            if call["op"] == "renew" and call.get("lock"):
                what = "renew"
            elif call["op"] in ("release", "unlock") and call.get("result") == "released":
                what = "release"
            else:
                continue
            own = [a for a in by_owner.get(owner, []) if a.t1 < call["t0"]]
            if not own:
                yield Violation(
                    3, f"{resource}: a {what} by {owner}, who never held it, succeeded", (call,)
                )
                continue
            # The holder: the largest token handed out before the call started
            # (the latest to return may have been granted earlier, then stalled).
            holder = holders[bisect.bisect_left(ends, call["t0"]) - 1]
            if holder.owner != owner:
                yield Violation(
                    3,
                    f"{resource}: a {what} by {owner} succeeded after {holder.owner} "
                    f"had acquired it (token {holder.token})",
                    (holder.event, call),
                )
                continue
            between = releases[
                bisect.bisect_right(release_ends, own[-1].t1) : bisect.bisect_left(
                    release_ends, call["t0"]
                )
            ]
            gone = [e for e in between if e is not call and e["t0"] > own[-1].t1]
            if gone:
                yield Violation(
                    3,
                    f"{resource}: a {what} by {owner} succeeded after the lock had been released",
                    (gone[0], call),
                )
            elif what == "renew" and call["lock"]["token"] != holder.token:
                yield Violation(
                    3, f"{resource}: a renew by {owner} changed the fencing token", (call,)
                )


def _running_max(ordered: list[Acquisition]) -> list[Acquisition]:
    """For each position, the acquisition with the largest token up to it."""
    best: list[Acquisition] = []
    for acquisition in ordered:
        best.append(acquisition if not best or acquisition.token > best[-1].token else best[-1])
    return best


def _released(event: Event) -> bool:
    if event["op"] == "force_release":
        return bool(event.get("released"))
    return event["op"] in ("release", "unlock") and event.get("result") == "released"


# -- 4 ---------------------------------------------------------------------------------


def _faults(history: History) -> Iterable[Violation]:
    calls: dict[str, list[Event]] = {}
    for event in history.events:
        if event["op"] in LOCK_OPS and "t1" in event:
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
    for key in ("lock", "result", "released", "deleted"):
        if key in call:
            value = call[key]
            return "not acquired" if key == "lock" and value is None else f"{key}={value!r}"
    return "a success"


# -- 5 ---------------------------------------------------------------------------------


def _counter(history: History, allowed: set[tuple[str, str]]) -> Iterable[Violation]:
    if history.store is None or history.log is None:
        return
    log = history.log
    for section in history.sections.values():
        for write in section.writes:
            recorded = None if write.event is None else write.event.get("accepted")
            if recorded is not None and recorded != (write.write_id in log):
                yield Violation(
                    5,
                    f"{section.cs}: the store's log disagrees with the writer about "
                    f"write {write.write_id}",
                    (write.event,) if write.event is not None else (),
                )
    rows_by_resource: dict[str, list[tuple[int, str, int, str, int]]] = {}
    for row in log.values():
        rows_by_resource.setdefault(row[1], []).append(row)
    for resource, state in history.store["resources"].items():
        rows = sorted(rows_by_resource.get(resource, []))
        excused, lost = 0, []
        last_writer: dict[int, str] = {}  # counter value -> write id that wrote it
        for _, _, _, write_id, value in rows:
            previous = last_writer.get(value)
            if previous is not None:
                pair = (previous.rpartition("#")[0], write_id.rpartition("#")[0])
                if pair in allowed or pair[::-1] in allowed:
                    excused += 1
                else:
                    lost.append((previous, write_id))
            last_writer[value] = write_id
        if state["counter"] != len(rows) - excused or lost:
            yield Violation(
                5,
                f"{resource}: counter {state['counter']} after {len(rows)} accepted writes "
                f"({excused} lost updates excused by allowed overlaps; lost: {lost[:3]})",
                (history.store,),
            )
        if rows and state["max_token"] != max(r[2] for r in rows):
            yield Violation(
                5,
                f"{resource}: the store's largest token is not its last write's",
                (history.store,),
            )


# -- 6 ---------------------------------------------------------------------------------


def _snapshots(history: History) -> Iterable[Violation]:
    snapshots = [e for e in history.events if e["op"] == "snapshot"]
    if not snapshots:
        return
    expiries = _expiries(history)
    for calls in history.calls.values():
        calls.sort(key=lambda e: e["t0"])
    starts = {resource: [e["t0"] for e in calls] for resource, calls in history.calls.items()}
    for snapshot in snapshots:
        now = when(snapshot["now"])
        rows = {row["resource"]: row for row in snapshot["rows"]}
        for resource, acquisitions in history.acquisitions.items():
            done = [a for a in acquisitions if a.t1 < snapshot["t0"]]
            if not done:
                continue
            largest = max(done, key=lambda a: a.token)
            row = rows.get(resource)
            if row is not None and row["token"] < largest.token:
                yield Violation(
                    6,
                    f"{resource}: the row's token {row['token']} at the snapshot of "
                    f"{snapshot['now']} is below token {largest.token}, granted before",
                    (largest.event, snapshot),
                )
                continue
            latest = max(done, key=lambda a: a.t1)
            expiry = max(
                latest.expires_at, expiries.get((resource, latest.owner), latest.expires_at)
            )
            if expiry <= now or _ambiguous(history, starts, resource, latest, snapshot):
                continue
            if row is None or row["owner"] != latest.owner or row["token"] != latest.token:
                yield Violation(
                    6,
                    f"{resource}: {latest.owner}'s lock (token {latest.token}, valid until "
                    f"{expiry.isoformat()}) is missing at the snapshot of "
                    f"{snapshot['now']}: found {row}",
                    (latest.event, snapshot),
                )


def _expiries(history: History) -> dict[tuple[str, str], datetime]:
    """The latest known expiry of each (resource, owner), after renewals."""
    expiries: dict[tuple[str, str], datetime] = {}

    def extend(key: tuple[str, str], expiry: datetime) -> None:
        expiries[key] = max(expiries.get(key, expiry), expiry)

    for resource, calls in history.calls.items():
        for call in calls:
            lock = call.get("lock")
            if call["op"] == "renew" and lock:
                extend((resource, lock["owner"]), when(lock["expires_at"]))
    for section in history.sections.values():
        extend((section.resource, section.owner), section.expires_at)
    return expiries


def _ambiguous(
    history: History,
    starts: dict[str, list[float]],
    resource: str,
    latest: Acquisition,
    snapshot: Event,
) -> bool:
    """Whether a call may have legitimately changed the lock between the
    acquisition and the snapshot: a release (or one whose outcome is unknown),
    or another acquisition that ran while the snapshot was taken."""
    calls = history.calls.get(resource, [])
    first = bisect.bisect_left(starts.get(resource, []), latest.t0 - LONGEST_CALL)
    last = bisect.bisect_left(starts.get(resource, []), snapshot["t1"])
    for call in calls[first:last]:
        if call["t0"] >= snapshot["t1"] or call.get("t1", math.inf) <= latest.t0:
            continue
        if call["op"] in ("release", "force_release", "unlock") and (
            _released(call) or "error" in call or "t1" not in call
        ):
            return True
        if (
            call["op"] in ("acquire", "lock")
            and call is not latest.event
            and call.get("t1", math.inf) > snapshot["t0"]
            and call.get("lock")
        ):
            return True
    return False
