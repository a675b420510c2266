"""Who waits for whom, read for operators: ``manage.py dlock show --graph`` and
a lock's page in the admin.

A ``lock()`` waiter whose thread or task holds other locks writes them on its
ticket (``LockWaiter.holding``, ``django_dlock.locking.deadlock``). From the
tickets and the lock rows this module reads, around one resource: its holders
(and which of them wait themselves, for what), its waiters in queue order
(and what each holds, and whether it validly holds it now), then the same for
the resources those lead to, breadth-first, each resource once; and the
cycles among them, the deadlocks ``lock()`` breaks by raising ``LockDeadlock``.

Read-only. Owners are secrets: they match a holder to its waiting ticket and
are never returned; a holder or a waiter is named by its label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django_dlock.locking.deadlock import (
    QueuedWaiter,
    cycles_through,
    holding_of,
    valid_holds,
    waiters_holding,
)
from django_dlock.models import DistributedLock, LockWaiter

__all__ = [
    "GraphHolder",
    "GraphWaiter",
    "HeldLock",
    "Node",
    "WaitForGraph",
    "WaitingWhileHolding",
    "deadlock_in_words",
    "queue_head",
    "waiting_while_holding",
    "wait_for_graph",
    "waiting_holders",
]

# How far ``wait_for_graph`` follows the edges from its resource (resources
# more steps away are named, not read), how many resources it reads at most,
# and how many waiters of each it lists (the head of the queue).
LEVELS = 3
MOST_RESOURCES = 25
WAITERS_PER_RESOURCE = 20


@dataclass(frozen=True)
class HeldLock:
    """A lock a waiter says it holds: its resource, and whether the waiter
    validly holds it now by the lock rows (a hold that expired or was
    force-released meanwhile is not)."""

    resource: str
    valid: bool


@dataclass(frozen=True)
class GraphWaiter:
    """A live ``lock()`` waiter, at its place in its resource's queue."""

    position: int  # 1 is the head
    ticket: int
    label: str
    holding: tuple[HeldLock, ...]

    def name(self) -> str:
        return repr(self.label) if self.label else f"ticket {self.ticket}"


@dataclass(frozen=True)
class GraphHolder:
    """A valid hold, and what its holder waits for in ``lock()`` meanwhile."""

    label: str
    waiting_for: str | None  # the resource; None when it does not wait
    ticket: int | None  # its waiting ticket

    def name(self) -> str:
        return repr(self.label) if self.label else "a holder"


@dataclass(frozen=True)
class Node:
    """A resource: its holders, oldest first, and the head of its queue."""

    resource: str
    holders: tuple[GraphHolder, ...]
    waiters: tuple[GraphWaiter, ...]
    more_waiters: int  # live waiters queued behind those listed


@dataclass(frozen=True)
class WaitForGraph:
    nodes: tuple[Node, ...]  # breadth-first from the resource asked about
    not_followed: tuple[str, ...]  # resources the edges lead to beyond the limits
    deadlocks: tuple[list[QueuedWaiter], ...]  # each from its oldest ticket


@dataclass(frozen=True)
class WaitingWhileHolding:
    """A live waiter that holds other locks: what it waits for, and what it holds."""

    resource: str
    name: str  # its label quoted, or "ticket N"
    holding: tuple[HeldLock, ...]


def waiting_while_holding(
    *, using: str, prefix: str = ""
) -> tuple[list[WaitingWhileHolding], list[list[QueuedWaiter]]]:
    """The live waiters of resources starting with ``prefix`` that hold other
    locks, by resource and then queue order; and the deadlocks through them."""
    holding = waiters_holding(using)
    mine = sorted(
        (waiter for waiter in holding if waiter.resource.startswith(prefix)),
        key=lambda waiter: (waiter.resource, waiter.ticket),
    )
    valid = valid_holds(using, (pair for waiter in mine for pair in waiter.holding))
    found = [
        WaitingWhileHolding(
            waiter.resource,
            waiter.name(),
            tuple(HeldLock(pair[0], pair in valid) for pair in waiter.holding),
        )
        for waiter in mine
    ]
    return found, cycles_through(using, holding, [waiter.ticket for waiter in mine])


def waiting_holders(
    resource: str, *, using: str, holding: Sequence[QueuedWaiter] | None = None
) -> list[GraphHolder]:
    """The valid holders of ``resource``, oldest first, each with what it waits
    for (``holding``: the live tickets with holdings, read when not given)."""
    if holding is None:
        holding = waiters_holding(using)
    tickets = {pair: waiter for waiter in holding for pair in waiter.holding}
    holders = []
    for hold in DistributedLock.objects.db_manager(using).holders(resource):
        waiter = tickets.get((hold.resource, hold.owner))
        holders.append(
            GraphHolder(
                label=hold.label,
                waiting_for=None if waiter is None else waiter.resource,
                ticket=None if waiter is None else waiter.ticket,
            )
        )
    return holders


def wait_for_graph(
    resource: str,
    *,
    using: str,
    levels: int = LEVELS,
    most: int = MOST_RESOURCES,
    waiters_per_resource: int = WAITERS_PER_RESOURCE,
) -> WaitForGraph:
    """The wait-for graph around ``resource``: the resource, then those its
    waiters hold and its holders wait for, and so on for ``levels`` steps
    (at most ``most`` resources); the deadlocks through their waiters."""
    holding = waiters_holding(using)
    nodes: list[Node] = []
    seen = {resource}
    level = [resource]
    not_followed: list[str] = []
    for step in range(levels + 1):
        following: list[str] = []
        for name in level:
            if len(nodes) == most:
                not_followed.append(name)
                continue
            node = _node(name, using=using, holding=holding, shown=waiters_per_resource)
            nodes.append(node)
            for leads_to in _edges(node):
                if leads_to not in seen:
                    seen.add(leads_to)
                    following.append(leads_to)
        if step == levels:
            not_followed += following
        level = following
    tickets = [waiter.ticket for node in nodes for waiter in node.waiters]
    tickets += [h.ticket for node in nodes for h in node.holders if h.ticket is not None]
    return WaitForGraph(
        nodes=tuple(nodes),
        not_followed=tuple(not_followed),
        deadlocks=tuple(cycles_through(using, holding, tickets)),
    )


def deadlock_in_words(cycle: Sequence[QueuedWaiter]) -> str:
    """A cycle as a sentence: who holds what and waits for what, in its order."""
    return "; ".join(
        f"{waiter.name()} holds {cycle[index - 1].resource} and waits for {waiter.resource}"
        for index, waiter in enumerate(cycle)
    )


def queue_head(resource: str, *, using: str, shown: int) -> tuple[list[LockWaiter], int]:
    """The first ``shown`` live waiters of ``resource`` in queue order (their
    tickets carry their owners: for the caller to keep to itself), and how many
    more wait behind them."""
    queue = LockWaiter.objects.using(using).live().filter(resource=resource).order_by("pk")
    rows = list(queue[: shown + 1])
    more = queue.count() - shown if len(rows) > shown else 0
    return rows[:shown], more


def _node(resource: str, *, using: str, holding: Sequence[QueuedWaiter], shown: int) -> Node:
    rows, more = queue_head(resource, using=using, shown=shown)
    claims = {row.pk: holding_of(row.holding) for row in rows}
    valid = valid_holds(using, (pair for pairs in claims.values() for pair in pairs))
    waiters = tuple(
        GraphWaiter(
            position=position,
            ticket=row.pk,
            label=row.label,
            holding=tuple(HeldLock(pair[0], pair in valid) for pair in claims[row.pk]),
        )
        for position, row in enumerate(rows, start=1)
    )
    holders = tuple(waiting_holders(resource, using=using, holding=holding))
    return Node(resource=resource, holders=holders, waiters=waiters, more_waiters=more)


def _edges(node: Node) -> Iterable[str]:
    """Where the graph goes on from ``node``: what its waiters hold (their
    waiters wait behind them), and what its holders wait for."""
    for waiter in node.waiters:
        yield from (held.resource for held in waiter.holding)
    yield from (holder.waiting_for for holder in node.holders if holder.waiting_for)
