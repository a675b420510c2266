"""Invariant 6: nothing is lost. At each snapshot of the lock tables, the
latest completed acquisition of a resource that was neither released nor
expired (by the snapshot's database clock) is there, with its owner and
token: the resource's row for an exclusive holder, a row of the holds for a
reader or a permit. And no resource's row has a smaller token than one
granted on it before the snapshot (a released lock keeps its row and token,
a purged one its floor; every grant of any kind moves the row's token)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from datetime import datetime

from tools.torture.history import Event
from tools.torture.sections import ACQUIRING, SHARED, Acquisition, History, when
from tools.torture.violations import Violation

# No lock call of a torture run takes longer (seconds); waits time out sooner.
LONGEST_CALL = 120.0


def snapshots(history: History) -> Iterable[Violation]:
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
        holds = {(hold["resource"], hold["owner"]): hold for hold in snapshot.get("holds", [])}
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
            if latest.mode == SHARED:
                if "holds" not in snapshot:
                    continue  # a snapshot of the resources' rows only
                found = holds.get((resource, latest.owner))
            else:
                found = row if row is not None and row["owner"] == latest.owner else None
            if found is None or found["token"] != latest.token:
                yield Violation(
                    6,
                    f"{resource}: {latest.owner}'s {latest.mode} hold (token {latest.token}, "
                    f"valid until {expiry.isoformat()}) is missing at the snapshot of "
                    f"{snapshot['now']}: found {found or row}",
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
            call["op"] in ACQUIRING
            and call is not latest.event
            and call.get("t1", math.inf) > snapshot["t0"]
            and call.get("lock")
        ):
            return True
    return False


def _released(event: Event) -> bool:
    if event["op"] == "force_release":
        return bool(event.get("released"))
    return event["op"] in ("release", "unlock") and event.get("result") == "released"
