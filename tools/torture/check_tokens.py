"""Invariants 2, 3 and 12's terms: the fencing tokens the acquisitions got, and
who renewed and released.

2. Fencing tokens strictly increase per resource in acquisition order, across
   kinds: a grant (exclusive, a reader's, a permit, a part of an
   all-or-nothing call, an upgrade or a downgrade) whose call started after
   another had returned has a larger token; and one token is only ever given
   to one owner. The holder again (a re-acquire, a reentrant hold more) gets
   the token it has: that is no new grant, and is not ordered.
3. A release or renew that succeeded (released, decremented, renewed) was
   made by a holder: its owner had acquired the lock, and since then nobody
   had taken it exclusively, it had not been released, nor force-released.
   Readers and permits hold beside each other: a later shared grant to
   another owner does not end a shared hold.
12. Leaders' terms strictly increase: invariant 2 for the resources that
   leaders campaign for, reported as 12.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from tools.torture.history import Event
from tools.torture.sections import SHARED, Acquisition, History
from tools.torture.violations import Violation


def running_max(ordered: list[Acquisition]) -> list[Acquisition]:
    """For each position, the acquisition with the largest token up to it."""
    best: list[Acquisition] = []
    for acquisition in ordered:
        best.append(acquisition if not best or acquisition.token > best[-1].token else best[-1])
    return best


# -- 2 and 12 ---------------------------------------------------------------------------


def tokens(history: History) -> Iterable[Violation]:
    for resource, acquisitions in history.acquisitions.items():
        invariant = 12 if resource in history.leaders else 2
        ordered = sorted(acquisitions, key=lambda a: a.t1)
        first: dict[int, Acquisition] = {}
        for acquisition in ordered:
            seen = first.setdefault(acquisition.token, acquisition)
            if seen.owner != acquisition.owner or (
                seen.acquired_at
                and acquisition.acquired_at
                and seen.acquired_at != acquisition.acquired_at
            ):
                yield Violation(
                    invariant,
                    f"{resource}: token {acquisition.token} was issued twice, to "
                    f"{seen.owner} and to {acquisition.owner}",
                    (seen.event, acquisition.event),
                )
        ends = [a.t1 for a in ordered]
        best = running_max(ordered)
        for acquisition in acquisitions:
            if acquisition.regrant:
                continue
            n = bisect.bisect_left(ends, acquisition.t0)
            if n and best[n - 1].token > acquisition.token:
                yield Violation(
                    invariant,
                    f"{resource}: token {acquisition.token} ({acquisition.mode}) was issued "
                    f"after token {best[n - 1].token} ({best[n - 1].mode}) had been",
                    (best[n - 1].event, acquisition.event),
                )


# -- 3 ----------------------------------------------------------------------------------


def _ends_hold_of(event: Event, owner: str | None) -> bool:
    """Whether ``event`` (a call that returned) ended ``owner``'s hold (with
    ``owner`` None: whoever's)."""
    if event["op"] == "force_release":
        targeted = event.get("owner")
        return bool(event.get("released")) and (None in (owner, targeted) or targeted == owner)
    return (
        event["op"] in ("release", "unlock")
        and owner in (None, event.get("owner"))
        and event.get("result") == "released"
    )


def _succeeded(call: Event) -> str | None:
    if call["op"] == "renew" and call.get("lock"):
        return "renew"
    if call["op"] in ("release", "unlock") and call.get("result") in ("released", "decremented"):
        return "release"
    return None


def owners(history: History) -> Iterable[Violation]:
    for resource, calls in history.calls.items():
        acquisitions = sorted(history.acquisitions.get(resource, []), key=lambda a: a.t1)
        ends = [a.t1 for a in acquisitions]
        holders = running_max(acquisitions)
        by_owner: dict[str, list[Acquisition]] = {}
        for acquisition in acquisitions:
            by_owner.setdefault(acquisition.owner, []).append(acquisition)
        ending = sorted(
            (e for e in calls if "t1" in e and _ends_hold_of(e, None)),
            key=lambda e: e["t1"],
        )
        ending_ends = [e["t1"] for e in ending]
        for call in calls:
            what = _succeeded(call)
            if what is None:
                continue
            owner: str = call.get("owner") or ""
            own = [a for a in by_owner.get(owner, []) if a.t1 < call["t0"]]
            if not own:
                yield Violation(
                    3, f"{resource}: a {what} by {owner}, who never held it, succeeded", (call,)
                )
                continue
            mine = own[-1]
            # The holder: the largest token handed out before the call started
            # (the latest to return may have been granted earlier, then stalled).
            holder = holders[bisect.bisect_left(ends, call["t0"]) - 1]
            since = acquisitions[
                bisect.bisect_right(ends, mine.t1) : bisect.bisect_left(ends, call["t0"])
            ]
            # Those since with a smaller token were granted before this owner's
            # (their calls returned later): they cannot have taken it from it.
            taken = holder.owner != owner and not (
                mine.mode == SHARED
                and all(
                    a.mode == SHARED for a in since if a.owner != owner and a.token > mine.token
                )
            )
            if taken:
                yield Violation(
                    3,
                    f"{resource}: a {what} by {owner} succeeded after {holder.owner} "
                    f"had acquired it (token {holder.token}, {holder.mode})",
                    (holder.event, call),
                )
                continue
            between = ending[
                bisect.bisect_right(ending_ends, mine.t1) : bisect.bisect_left(
                    ending_ends, call["t0"]
                )
            ]
            # An exclusive hold ends with any release that answered released
            # (a stranger's too: that it succeeded is the violation); a
            # shared one with its own owner's.
            whose = None if mine.mode != SHARED else owner
            ended = [
                e
                for e in between
                if e is not call and e["t0"] > mine.t1 and _ends_hold_of(e, whose)
            ]
            if ended:
                yield Violation(
                    3,
                    f"{resource}: a {what} by {owner} succeeded after its hold had been released",
                    (ended[0], call),
                )
            elif what == "renew" and call["lock"]["token"] != mine.token:
                yield Violation(
                    3, f"{resource}: a renew by {owner} changed the fencing token", (call,)
                )
