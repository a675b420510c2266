"""Invariants 13 and 14: a throttle's decisions, on the database's clock.

13. No window of one period holds more than N granted uses of a key: any
    N + 1 grants lie at least one period apart, first to last.
14. Each decision agrees with the grants before it: a refusal only while the
    period before it holds N grants, with ``retry_after`` the time until the
    oldest of them leaves the window; a grant's ``remaining`` is N - 1 less
    the grants in the period before it.

A use whose answer is unknown (it raised: the decision may have committed)
may be one of the grants of a window; so may a grant at the very same
database time (its order is unknown). Where the count hangs on such a use,
14 checks bounds instead of the exact count, and ``retry_after`` only as
more than zero and at most the period. Uses of a process killed mid-call
leave no event: the torture run kills no process that uses throttles.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from tools.torture.history import Event
from tools.torture.sections import History, when
from tools.torture.violations import Violation


@dataclass(frozen=True)
class Use:
    """A throttle's answered decision."""

    at: datetime
    granted: bool
    limit: int
    period: timedelta
    event: Event


def limits(history: History) -> Iterable[Violation]:
    """Invariant 13."""
    for key, (uses, _) in _by_key(history.events).items():
        grants = [use for use in uses if use.granted]
        for n, last in enumerate(grants):
            if n < last.limit:
                continue
            first = grants[n - last.limit]
            if last.at - first.at < last.period:
                yield Violation(
                    13,
                    f"{key}: {last.limit + 1} uses granted within {last.at - first.at} "
                    f"(rate {last.event['rate']}), from {first.at.isoformat()} "
                    f"to {last.at.isoformat()}",
                    tuple(grant.event for grant in grants[n - last.limit : n + 1]),
                )


def decisions(history: History) -> Iterable[Violation]:
    """Invariant 14."""
    for key, (uses, unknown) in _by_key(history.events).items():
        grants = [use for use in uses if use.granted]
        times = [use.at for use in grants]
        for use in uses:
            start = use.at - use.period
            lo = bisect.bisect_right(times, start)
            ties = bisect.bisect_left(times, use.at)
            sure = grants[lo:ties]  # decided before it, within the period
            tied = sum(1 for other in grants[ties:] if other.at == use.at and other is not use)
            possible = tied + _unknown_within(unknown, use)
            yield from _judge(key, use, sure, possible)


def _judge(key: str, use: Use, sure: list[Use], possible: int) -> Iterable[Violation]:
    event = use.event
    window = f"{len(sure)} grant(s)" + (f" and {possible} unknown" if possible else "")
    if not use.granted:
        retry_after = timedelta(microseconds=event["retry_after"])
        if len(sure) + possible < use.limit:
            yield Violation(
                14,
                f"{key}: refused at {use.at.isoformat()} with {window} in the period "
                f"before it (rate {event['rate']})",
                (event, *(grant.event for grant in sure)),
            )
        elif not timedelta(0) < retry_after <= use.period:
            yield Violation(14, f"{key}: refused with retry_after {retry_after}", (event,))
        elif (
            not possible
            and len(sure) == use.limit
            and use.at + retry_after != sure[0].at + use.period
        ):
            yield Violation(
                14,
                f"{key}: refused at {use.at.isoformat()} with retry_after {retry_after}, "
                f"but its oldest grant {sure[0].at.isoformat()} leaves the window at "
                f"{(sure[0].at + use.period).isoformat()}",
                (event, sure[0].event),
            )
        return
    most = use.limit - 1 - len(sure)
    if event["retry_after"] != 0 or not most - possible <= event["remaining"] <= most:
        yield Violation(
            14,
            f"{key}: granted at {use.at.isoformat()} with {window} in the period before "
            f"it, answering remaining {event['remaining']} and retry_after "
            f"{event['retry_after']} µs (rate {event['rate']})",
            (event, *(grant.event for grant in sure)),
        )


def _unknown_within(unknown: list[Event], use: Use) -> int:
    """How many uses of unknown outcome may have been decided in the period
    before ``use`` (on the monotonic clock, which runs as the database's)."""
    seconds = use.period.total_seconds()
    event = use.event
    return sum(1 for u in unknown if u["t1"] > event["t0"] - seconds and u["t0"] < event["t1"])


def _by_key(events: list[Event]) -> dict[str, tuple[list[Use], list[Event]]]:
    """Each key's answered decisions, by database time, and its uses that raised."""
    keys: dict[str, tuple[list[Use], list[Event]]] = defaultdict(lambda: ([], []))
    for event in events:
        if event["op"] != "throttle":
            continue
        uses, unknown = keys[event["key"]]
        if "granted" in event:
            period = timedelta(microseconds=event["period"])
            uses.append(Use(when(event["at"]), event["granted"], event["limit"], period, event))
        else:
            unknown.append(event)
    for uses, _ in keys.values():
        uses.sort(key=lambda use: use.at)
    return dict(keys)
