"""Who waits for whom: the wait-for graph of ``lock()``'s waiters, and the
deadlock a waiter finds in it.

A waiter whose thread or task holds other locks with ``lock()`` while it waits
writes them on its ticket (``LockWaiter.holding``: resources and owners). A
waiter V waits for a waiter W when W's ticket says that it holds V's resource
and the lock rows say that W's owner validly holds it still. A cycle of such
waiters never ends by itself: each waits for the next, until a ttl runs out.
The waiter with the newest ticket in the cycle raises ``LockDeadlock`` at its
next look (each of them looks while it waits; only the newest raises, so
exactly one does, also when two close the cycle at once); it leaves the queue,
and its blocks release what it holds as the exception unwinds them. As
PostgreSQL does for row locks, but across dlock's locks, which may be held on
any database and for any work.

Waiters that hold nothing write nothing and never look for a cycle: they cannot
be in one. Locks taken with the manager (``acquire()``), rather than ``lock()``,
are not known to the waiter, nor are those of ``lock()`` of a list of resources.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db.models import Q

from django_dlock.exceptions import LockDeadlock
from django_dlock.models import DistributedLock, LockHold, LockWaiter
from django_dlock.rules.clock import DatabaseNow

__all__ = [
    "QueuedWaiter",
    "check_for_deadlock",
    "cycles_through",
    "declare_holding",
    "holding_of",
    "valid_holds",
    "waiters_holding",
]

# How often (seconds) a waiter that holds other locks looks for a cycle, at most.
LOOK_EVERY = 0.25


@dataclass(frozen=True)
class QueuedWaiter:
    """A live ticket of a waiter that holds other locks."""

    ticket: int
    resource: str  # what it waits for
    label: str
    holding: tuple[tuple[str, str], ...]  # (resource, owner) of what it holds

    @property
    def held_resources(self) -> set[str]:
        return {resource for resource, _ in self.holding}

    def name(self) -> str:
        return repr(self.label) if self.label else f"ticket {self.ticket}"


def declare_holding(using: str, ticket: int, holding: Sequence[tuple[str, str]]) -> None:
    """Write on the waiter's ``ticket`` what its thread or task holds."""
    value = json.dumps(sorted([resource, owner] for resource, owner in holding))
    LockWaiter.objects.using(using).filter(pk=ticket).update(holding=value)


def waiters_holding(using: str, resources: Sequence[str] | None = None) -> list[QueuedWaiter]:
    """The live waiters that hold other locks (of ``resources``' queues only,
    when given), oldest ticket first."""
    tickets = LockWaiter.objects.using(using).live().exclude(holding="")
    if resources is not None:
        tickets = tickets.filter(resource__in=resources)
    return [
        QueuedWaiter(ticket, resource, label, tuple(holding_of(holding)))
        for ticket, resource, label, holding in tickets.order_by("pk").values_list(
            "pk", "resource", "label", "holding"
        )
    ]


def holding_of(holding: str) -> list[tuple[str, str]]:
    """The (resource, owner) pairs of a ticket's ``holding`` ("" for none)."""
    return [(resource, owner) for resource, owner in json.loads(holding)] if holding else []


def check_for_deadlock(using: str, ticket: int) -> None:
    """Raise ``LockDeadlock`` if the waiter of ``ticket`` is the newest in a
    cycle of waiters, each validly holding what the one before waits for."""
    waiters = waiters_holding(using)
    cycle = _cycle_through(waiters, ticket)
    if cycle is None or max(waiter.ticket for waiter in cycle) != ticket:
        return
    # Each waiter's claim of its holds is its own; the lock rows tell whether
    # the one the previous waiter waits for is still valid (not lost meanwhile).
    claimed = _claimed_holds(cycle)
    if claimed <= valid_holds(using, claimed):
        raise _deadlock(cycle)


def cycles_through(
    using: str, waiters: list[QueuedWaiter], tickets: Iterable[int]
) -> list[list[QueuedWaiter]]:
    """Read-only, for those who show the graph (``dlock show --graph``, the
    admin): the cycles of ``waiters`` through any of ``tickets`` whose holds
    are valid now, the ones ``check_for_deadlock`` raises for. Each cycle once,
    from its oldest ticket (each waits for the next, the last for the first);
    the cycles by their oldest ticket."""
    found: dict[frozenset[int], list[QueuedWaiter]] = {}
    for ticket in sorted(set(tickets)):
        cycle = _cycle_through(waiters, ticket)
        if cycle is None or (key := frozenset(w.ticket for w in cycle)) in found:
            continue
        claimed = _claimed_holds(cycle)
        if claimed <= valid_holds(using, claimed):
            start = min(range(len(cycle)), key=lambda index: cycle[index].ticket)
            found[key] = cycle[start:] + cycle[:start]
    return sorted(found.values(), key=lambda cycle: cycle[0].ticket)


def _cycle_through(waiters: list[QueuedWaiter], ticket: int) -> list[QueuedWaiter] | None:
    """The waiters of a cycle through ``ticket``'s (itself first; each waits
    for the next, the last for the first), by a breadth-first search; None."""
    by_ticket = {waiter.ticket: waiter for waiter in waiters}
    start = by_ticket.get(ticket)
    if start is None:
        return None
    # Who waits for whom: V -> W where W holds V's resource.
    holders: dict[str, list[QueuedWaiter]] = {}
    for waiter in waiters:
        for resource in waiter.held_resources:
            holders.setdefault(resource, []).append(waiter)
    came_from: dict[int, int] = {}
    frontier = [start]
    while frontier:
        following = []
        for waiter in frontier:
            for holder in holders.get(waiter.resource, []):
                if holder.ticket == ticket:  # back at the start: the path is the cycle
                    path = [waiter]
                    while path[-1].ticket != ticket:
                        path.append(by_ticket[came_from[path[-1].ticket]])
                    return list(reversed(path))
                if holder.ticket not in came_from:
                    came_from[holder.ticket] = waiter.ticket
                    following.append(holder)
        frontier = following
    return None


def _claimed_holds(cycle: list[QueuedWaiter]) -> set[tuple[str, str]]:
    """The (resource, owner) holds the cycle stands on: what each waiter waits
    for, as the next one says it holds it."""
    claimed: set[tuple[str, str]] = set()
    for index, waiter in enumerate(cycle):
        holder = cycle[(index + 1) % len(cycle)]
        claimed.update(pair for pair in holder.holding if pair[0] == waiter.resource)
    return claimed


def valid_holds(using: str, pairs: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """Which (resource, owner) ``pairs`` are valid holds now: exclusive, or shared."""
    pairs = set(pairs)
    if not pairs:
        return set()
    wanted = Q()
    for resource, owner in pairs:
        wanted |= Q(resource=resource, owner=owner)
    now = DatabaseNow()
    exclusive = DistributedLock.objects.using(using).filter(wanted, expires_at__gt=now)
    shared = LockHold.objects.using(using).filter(wanted, expires_at__gt=now)
    return {
        *exclusive.values_list("resource", "owner"),
        *shared.values_list("resource", "owner"),
    }


def _deadlock(cycle: list[QueuedWaiter]) -> LockDeadlock:
    me, *others = cycle
    chain = "; ".join(
        f"{waiter.name()} holds {cycle[(index - 1) % len(cycle)].resource!r} and waits for "
        f"{waiter.resource!r}"
        for index, waiter in enumerate(cycle)
        if waiter is not me
    )
    held = cycle[-1].resource
    return LockDeadlock(
        f"Waiting for {me.resource!r} would never end: this waiter holds {held!r}, and {chain}. "
        "It joined the cycle last, so it gives up (its locks are released as its blocks end)."
    )
